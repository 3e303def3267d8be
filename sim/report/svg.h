#pragma once
// A small writer of inline SVG for the HTML report (sim/report/html_report.h): shapes, text and axes, as
// well-formed XML (every attribute quoted, text escaped), so that the report is XHTML that xmllint accepts.
//
//   Svg s(640, 360, "tokens/s per GPU against peak memory");
//   Axis x{0, 80, 60, 600, true};       // data 0..80 onto pixels 60..600
//   s.rect(10, 10, 50, 20, "#1f77b4");
//   std::string markup = s.str();
// Coordinates are pixels of the viewBox; the element scales to its container's width (CSS in html_report.cc).

#include <string>
#include <string_view>
#include <vector>

namespace tptune::svg {

// XML-escapes & < > " ' for text and attribute values.
std::string escape(std::string_view s);

// A linear map from data values [lo, hi] to pixels [p0, p1] (p1 < p0 for a y axis that grows upwards).
struct Axis {
  double lo = 0, hi = 1;
  double p0 = 0, p1 = 1;
  double at(double v) const { return hi == lo ? p0 : p0 + (v - lo) / (hi - lo) * (p1 - p0); }
};

// About `n` round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]; widens [lo, hi] to whole ticks.
std::vector<double> nice_ticks(double& lo, double& hi, int n = 6);
// A tick label: no trailing zeros, thousands as "12k" when `compact`.
std::string tick_label(double v, bool compact = false);

// An axis-aligned box of pixels: x0 <= x1, y0 <= y1 (y grows downwards).
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool intersects(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
  bool inside(const Box& o) const { return x0 >= o.x0 && x1 <= o.x1 && y0 >= o.y0 && y1 <= o.y1; }
};
// The box of Svg::marker(shape, x, y, r) whatever its shape (the diamond reaches 1.2 r).
inline Box marker_box(double x, double y, double r) { return {x - 1.2 * r, y - 1.2 * r, x + 1.2 * r, y + 1.2 * r}; }
// The box a text takes when drawn by Svg::text at (x, y) with `anchor` (start | middle | end) at font size `px`: an
// upper bound for DejaVu Sans / Helvetica (0.68 em per character, bold included; ascent 0.8 em, descent 0.25 em).
Box text_box(double x, double y, std::string_view s, double px, std::string_view anchor = "start");
// Where to write `s` (font size `px`, anchor start) as the label of a marker at (x, y) of radius `r`: the first of
// the places around it (right, left, above, below, then the same further out) whose text box meets none of `avoid`
// and lies inside `area`. Returns the text's (x, y) and its box; when no place is free, the first place tried.
struct Placed {
  double x = 0, y = 0;
  Box box;
};
Placed place_label(double x, double y, double r, std::string_view s, double px, const std::vector<Box>& avoid,
                   const Box& area);

class Svg {
 public:
  Svg(double width, double height, std::string_view title);
  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view tooltip = {},
            std::string_view extra = {});
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = {});
  void polyline(const std::vector<std::pair<double, double>>& pts, std::string_view stroke, double width = 1.5);
  // A marker centred at (x, y): shape 0 circle, 1 square, 2 triangle, 3 diamond, 4 star (for highlighted points).
  void marker(int shape, double x, double y, double r, std::string_view fill, std::string_view stroke,
              std::string_view tooltip = {});
  // anchor: start | middle | end; `cls` a CSS class of html_report.cc (small, label, title, axis).
  void text(double x, double y, std::string_view s, std::string_view anchor = "start", std::string_view cls = {},
            double rotate = 0);
  // Axes with ticks, grid lines and labels (units in the label: "peak memory per GPU (GiB)").
  void x_axis(const Axis& x, const std::vector<double>& ticks, double y, double grid_top, std::string_view label,
              bool compact = false);
  void y_axis(const Axis& y, const std::vector<double>& ticks, double x, double grid_right, std::string_view label,
              bool compact = false);
  std::string str() const { return out_ + "</svg>\n"; }

 private:
  std::string out_;
};

}  // namespace tptune::svg
