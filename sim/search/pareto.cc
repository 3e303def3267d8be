#include "sim/search/pareto.h"

#include <algorithm>

namespace tptune {

namespace {

// `at(i)`: the result of feasible candidate i.
template <class At>
std::vector<int> front_of(const At& at, const std::vector<int>& feasible) {
  auto tps = [&](int i) { return at(i).report.tokens_per_second_per_gpu; };
  auto mem = [&](int i) { return at(i).report.memory.peak; };
  std::vector<int> order = feasible;
  // Memory ascending; at equal memory the fastest first, then enumeration order: the first of a group that is
  // equal on both is the one kept.
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (mem(a) != mem(b)) return mem(a) < mem(b);
    if (tps(a) != tps(b)) return tps(a) > tps(b);
    return a < b;
  });
  // Sweep: a candidate is on the front iff it is faster than everything that needs no more memory (those all come
  // before it in this order).
  std::vector<int> front;
  for (int i : order)
    if (front.empty() || tps(i) > tps(front.back())) front.push_back(i);
  return front;
}

}  // namespace

std::vector<int> pareto_front(const std::vector<CandidateResult>& results, const std::vector<int>& feasible) {
  return front_of([&](int i) -> const CandidateResult& { return results[static_cast<size_t>(i)]; }, feasible);
}

std::vector<int> pareto_front(const CandidateResults& results, const std::vector<int>& feasible) {
  return front_of([&](int i) -> const CandidateResult& { return *results.find(static_cast<size_t>(i)); }, feasible);
}

}  // namespace tptune
