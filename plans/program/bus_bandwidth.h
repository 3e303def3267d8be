#pragma once
// nccl-tests' bus-bandwidth factors, defined once for the simulator (sim/cost/) and the collectives benchmark
// (tp-run bench collectives) alike. Sizes follow nccl-tests: S is the full (unsharded) tensor's bytes; algbw = S /
// time; busbw = algbw x bus_factor, the per-rank link traffic a ring needs:
//   all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; p2p (send/recv) 1; a group of 1: 0.
#include "plans/language/placement.h"

namespace tptune {

double bus_factor(CollectiveKind k, int n);

}  // namespace tptune
