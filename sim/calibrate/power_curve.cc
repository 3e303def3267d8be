#include "sim/calibrate/power_curve.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"

namespace tptune {

namespace {

struct Point {
  double power_W, rate;
  const KernelSource* source;
  const KernelMeasurement* m;
};

}  // namespace

std::vector<PowerCurveClock> power_curve_clocks(const std::vector<KernelSource>& record) {
  // The held-at-a-limit sustained rows, by (architecture, dtype), in record order.
  std::map<std::pair<std::string, DType>, std::vector<Point>> curves;
  for (const auto& s : record)
    for (const auto& m : s.measurements)
      if (m.kind == KernelKind::gemm_sustained && m.power_limit_W > 0 && !m.architecture.empty() &&
          m.unit != KernelUnit::fraction_of_peak)
        curves[{m.architecture, m.dtype}].push_back({m.power_limit_W, m.value(), &s, &m});
  std::vector<PowerCurveClock> out;
  for (const auto& name : gpu_preset_names()) {
    const GpuSpec g = gpu_preset(name);
    const double preset = device_cost_params(g).tensor_clock_fraction;
    if (preset >= 1 || g.power_limit_W <= 0 || g.architecture.empty()) continue;
    PowerCurveClock c{name, g.power_limit_W, 0, preset, 0, {}, {}};
    double log_sum = 0;
    int dtypes = 0;
    for (const auto& [key, points] : curves) {
      if (key.first != g.architecture) continue;
      // Least squares of ln rate on ln P.
      double mx = 0, my = 0, top = 0;
      for (const Point& p : points) mx += std::log(p.power_W), my += std::log(p.rate), top = std::max(top, p.power_W);
      mx /= static_cast<double>(points.size());
      my /= static_cast<double>(points.size());
      double sxx = 0, sxy = 0;
      for (const Point& p : points) {
        sxx += (std::log(p.power_W) - mx) * (std::log(p.power_W) - mx);
        sxy += (std::log(p.power_W) - mx) * (std::log(p.rate) - my);
      }
      if (sxx <= 0) continue;  // one limit only: no curve
      const double alpha = sxy / sxx;
      const double clock = std::pow(g.power_limit_W / top, alpha);
      std::string at;
      for (const Point& p : points) {
        at += fmt::format("{}{:g} {} at {:g} W", at.empty() ? "" : ", ", p.m->figure, to_string(p.m->unit), p.power_W);
        if (std::find(c.sources.begin(), c.sources.end(), p.source->id) == c.sources.end())
          c.sources.push_back(p.source->id);
      }
      c.per_dtype.push_back(fmt::format("{} {:.3f} (alpha {:.3f}; {})", to_string(key.second), clock, alpha, at));
      c.reference_W = std::max(c.reference_W, top);
      log_sum += std::log(clock);
      ++dtypes;
    }
    if (dtypes == 0) continue;
    c.implied = std::exp(log_sum / dtypes);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace tptune
