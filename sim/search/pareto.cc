#include "sim/search/pareto.h"

#include <algorithm>

namespace tptune {

namespace {

// The front of `items` (a feasible candidate's index and its result).
std::vector<int> front_of(std::vector<std::pair<int, const CandidateResult*>> items) {
  auto tps = [](const auto& x) { return x.second->report.tokens_per_second_per_gpu; };
  auto mem = [](const auto& x) { return x.second->report.memory.peak; };
  // Memory ascending; at equal memory the fastest first, then enumeration order: the first of a group that is
  // equal on both is the one kept.
  std::sort(items.begin(), items.end(), [&](const auto& a, const auto& b) {
    if (mem(a) != mem(b)) return mem(a) < mem(b);
    if (tps(a) != tps(b)) return tps(a) > tps(b);
    return a.first < b.first;
  });
  // Sweep: a candidate is on the front iff it is faster than everything that needs no more memory (those all come
  // before it in this order).
  std::vector<int> front;
  double best = 0;
  for (const auto& x : items)
    if (front.empty() || tps(x) > best) {
      front.push_back(x.first);
      best = tps(x);
    }
  return front;
}

}  // namespace

std::vector<int> pareto_front(const std::vector<CandidateResult>& results, const std::vector<int>& feasible) {
  std::vector<std::pair<int, const CandidateResult*>> items;
  for (int i : feasible) items.emplace_back(i, &results[static_cast<size_t>(i)]);
  return front_of(std::move(items));
}

std::vector<int> pareto_front(const CandidateResults& results, const std::vector<int>& feasible) {
  std::vector<std::pair<int, const CandidateResult*>> items;
  for (int i : feasible) items.emplace_back(i, results.find(static_cast<size_t>(i)));
  return front_of(std::move(items));
}

}  // namespace tptune
