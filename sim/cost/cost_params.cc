#include "sim/cost/cost_params.h"

#include <algorithm>
#include <cmath>

#include "plans/program/bus_bandwidth.h"

namespace tptune {

double RankCurve::at(int n) const {
  if (n <= ranks[0]) return value[0];
  if (n >= ranks.back()) return value.back();
  // A tabulated size (a TP group of 2, 4 or 8: nearly every call) takes its value as it is, without the logarithms.
  for (size_t i = 1; i + 1 < ranks.size(); ++i)
    if (n == ranks[i]) return value[i];
  double x = std::log2(static_cast<double>(n));
  for (size_t i = 0; i + 1 < ranks.size(); ++i) {
    double x0 = std::log2(ranks[i]), x1 = std::log2(ranks[i + 1]);
    if (x <= x1) return value[i] + (value[i + 1] - value[i]) * (x - x0) / (x1 - x0);
  }
  return value.back();
}

double MeasuredCollective::time_us(CollectiveKind k, double S) const {
  if (points.size() >= 2 && S <= points.back()[0]) {
    if (S <= points.front()[0]) return points.front()[1];
    const auto hi = std::lower_bound(points.begin(), points.end(), S,
                                     [](const std::array<double, 2>& p, double x) { return p[0] < x; });
    const auto lo = hi - 1;
    return (*lo)[1] + ((*hi)[1] - (*lo)[1]) * (S - (*lo)[0]) / ((*hi)[0] - (*lo)[0]);
  }
  return alpha_us + S * bus_factor(k, ranks) / (busbw_GBps * 1e9) * 1e6;
}

const MeasuredCollective* CostParams::measured(CollectiveKind k, int ranks) const {
  for (const auto& m : measured_collectives)
    if (m.kind == k && m.ranks == ranks) return &m;
  return nullptr;
}

}  // namespace tptune
