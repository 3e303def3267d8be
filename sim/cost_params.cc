#include "sim/cost_params.h"

#include <cmath>

namespace tptune {

double RankCurve::at(int n) const {
  if (n <= ranks[0]) return value[0];
  if (n >= ranks.back()) return value.back();
  double x = std::log2(static_cast<double>(n));
  for (size_t i = 0; i + 1 < ranks.size(); ++i) {
    double x0 = std::log2(ranks[i]), x1 = std::log2(ranks[i + 1]);
    if (x <= x1) return value[i] + (value[i + 1] - value[i]) * (x - x0) / (x1 - x0);
  }
  return value.back();
}

const MeasuredCollective* CostParams::measured(CollectiveKind k, int ranks) const {
  for (const auto& m : measured_collectives)
    if (m.kind == k && m.ranks == ranks) return &m;
  return nullptr;
}

}  // namespace tptune
