#include "sim/report/svg.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace tptune::svg {

std::string escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  return o;
}

std::vector<double> nice_ticks(double& lo, double& hi, int n) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, n);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  lo = std::floor(lo / step) * step;
  hi = std::ceil(hi / step) * step;
  std::vector<double> t;
  for (double v = lo; v <= hi + step * 1e-6; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

std::string tick_label(double v, bool compact) {
  if (compact && std::abs(v) >= 1000) return fmt::format("{:g}k", v / 1000);
  return fmt::format("{:g}", v);
}

Box text_box(double x, double y, std::string_view s, double px, std::string_view anchor) {
  const double w = 0.68 * px * static_cast<double>(s.size());
  const double x0 = anchor == "middle" ? x - w / 2 : anchor == "end" ? x - w : x;
  return {x0, y - 0.8 * px, x0 + w, y + 0.25 * px};
}

Placed place_label(double x, double y, double r, std::string_view s, double px, const std::vector<Box>& avoid,
                   const Box& area) {
  const double w = text_box(0, 0, s, px).x1, gap = r + 3;
  std::optional<Placed> first;  // what to return when no place is free
  for (int ring = 0; ring < 8; ++ring) {
    const double d = ring * 0.9 * px;  // further out, one line at a time
    // Baselines: right of the marker (level with it, or lower by d), then above it; the same on the left; then
    // centred above and below.
    const std::pair<double, double> at[] = {{x + gap, y + 0.35 * px + d},         {x + gap, y - d + 0.35 * px - px},
                                            {x - gap - w, y + 0.35 * px + d},     {x - gap - w, y - d + 0.35 * px - px},
                                            {x - w / 2, y - gap - 0.25 * px - d}, {x - w / 2, y + gap + 0.8 * px + d}};
    for (const auto& [tx, ty] : at) {
      const Placed p{tx, ty, text_box(tx, ty, s, px)};
      if (!first) first = p;
      if (!p.box.inside(area)) continue;
      bool free = true;
      for (const Box& b : avoid) free = free && !p.box.intersects(b);
      if (free) return p;
    }
  }
  return *first;
}

Svg::Svg(double width, double height, std::string_view title) {
  out_ = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {:g} {:g}\" width=\"{:g}\" height=\"{:g}\" "
      "role=\"img\"><title>{}</title>\n",
      width, height, width, height, escape(title));
}

namespace {
std::string tip(std::string_view t) { return t.empty() ? "" : fmt::format("<title>{}</title>", escape(t)); }
}  // namespace

void Svg::rect(double x, double y, double w, double h, std::string_view fill, std::string_view tooltip,
               std::string_view extra) {
  out_ += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\" {}>{}</rect>\n",
                      x, y, std::max(0.0, w), std::max(0.0, h), fill, extra, tip(tooltip));
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
               std::string_view dash) {
  out_ += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"{:g}\"{}/>\n", x1, y1,
      x2, y2, stroke, width, dash.empty() ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", dash));
}

void Svg::polyline(const std::vector<std::pair<double, double>>& pts, std::string_view stroke, double width) {
  std::string p;
  for (const auto& [x, y] : pts) p += fmt::format("{:.1f},{:.1f} ", x, y);
  out_ +=
      fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:g}\"/>\n", p, stroke, width);
}

void Svg::marker(int shape, double x, double y, double r, std::string_view fill, std::string_view stroke,
                 std::string_view tooltip) {
  const std::string common = fmt::format("fill=\"{}\" stroke=\"{}\" stroke-width=\"1\"", fill, stroke);
  switch (shape) {
    case 1:
      out_ += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" {}>{}</rect>\n",
                          x - r * 0.85, y - r * 0.85, 1.7 * r, 1.7 * r, common, tip(tooltip));
      break;
    case 2:
      out_ += fmt::format("<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" {}>{}</polygon>\n", x,
                          y - 1.15 * r, x + r, y + 0.75 * r, x - r, y + 0.75 * r, common, tip(tooltip));
      break;
    case 3:
      out_ +=
          fmt::format("<polygon points=\"{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}\" {}>{}</polygon>\n",
                      x, y - 1.2 * r, x + r, y, x, y + 1.2 * r, x - r, y, common, tip(tooltip));
      break;
    case 4: {
      std::string p;
      for (int i = 0; i < 10; ++i) {
        const double a = M_PI / 2 + i * M_PI / 5, rr = i % 2 == 0 ? r : r * 0.45;
        p += fmt::format("{:.1f},{:.1f} ", x + rr * std::cos(a), y - rr * std::sin(a));
      }
      out_ += fmt::format("<polygon points=\"{}\" {}>{}</polygon>\n", p, common, tip(tooltip));
      break;
    }
    default:
      out_ += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" {}>{}</circle>\n", x, y, r, common,
                          tip(tooltip));
  }
}

void Svg::text(double x, double y, std::string_view s, std::string_view anchor, std::string_view cls, double rotate) {
  out_ += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\"{}{}>{}</text>\n", x, y, anchor,
      cls.empty() ? std::string() : fmt::format(" class=\"{}\"", cls),
      rotate == 0 ? std::string() : fmt::format(" transform=\"rotate({:g} {:.1f} {:.1f})\"", rotate, x, y), escape(s));
}

void Svg::x_axis(const Axis& x, const std::vector<double>& ticks, double y, double grid_top, std::string_view label,
                 bool compact) {
  line(x.p0, y, x.p1, y, "#333");
  for (double t : ticks) {
    const double px = x.at(t);
    line(px, y, px, grid_top, "#ddd", 0.7);
    line(px, y, px, y + 4, "#333");
    text(px, y + 16, tick_label(t, compact), "middle", "small");
  }
  text((x.p0 + x.p1) / 2, y + 34, label, "middle", "axis");
}

void Svg::y_axis(const Axis& y, const std::vector<double>& ticks, double x, double grid_right, std::string_view label,
                 bool compact) {
  line(x, y.p0, x, y.p1, "#333");
  for (double t : ticks) {
    const double py = y.at(t);
    line(x, py, grid_right, py, "#ddd", 0.7);
    line(x - 4, py, x, py, "#333");
    text(x - 7, py + 4, tick_label(t, compact), "end", "small");
  }
  text(x - 48, (y.p0 + y.p1) / 2, label, "middle", "axis", -90);
}

}  // namespace tptune::svg
