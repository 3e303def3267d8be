#pragma once
// The cost model's tunable parameters: efficiencies and latencies, as data in one struct.
//
// Hardware peaks live in the GPU specs (sim/gpus/*.yaml); this struct says how much of them real kernels and
// collectives reach, and what fixed costs they pay. The defaults below are what we believe for Hopper-class GPUs
// from public measurements (each with its source); calibration (`tp-plan calibrate`, sim/calibrate/) replaces
// them with a fit of measured profiles. All times are in microseconds.

#include <array>
#include <cstdint>
#include <vector>

#include "plans/language/placement.h"
#include "plans/model/dtype.h"

namespace tptune {

// A curve over the number of ranks of an intra-node collective: `value[i]` at `ranks[i]`, interpolated linearly in
// log2(ranks) and held constant outside.
struct RankCurve {
  std::array<double, 3> ranks{2, 4, 8};
  std::array<double, 3> value{1, 1, 1};
  double at(int n) const;
};

// A measured alpha-beta curve of one collective on one intra-node group size (a calibration's fit of nccl-tests-style
// data): time = alpha_us + S x bus_factor(kind, ranks) / busbw, S the full tensor's bytes (sim/cost/comm_cost.h).
struct MeasuredCollective {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 2;
  double alpha_us = 0;
  double busbw_GBps = 1;
  // The measured medians, (size S in bytes, time in us), S strictly ascending. With two or more, a size inside their
  // range takes the time interpolated linearly in S between its two neighbours (a measured curve need not be one
  // alpha-beta line: MPI and NCCL switch algorithms and protocols with the size), a size below the first takes the
  // first time, and a size above the last takes the alpha-beta line.
  std::vector<std::array<double, 2>> points;
  double time_us(CollectiveKind k, double bytes) const;  // of this curve (k: its kind, for the bus factor)
};

// Every field, with its default and the sources behind it, is in sim/cost/cost_param_list.h (one list that also
// generates the table of sim/cost/cost_param_fields.h): the efficiencies and fixed costs of compute (GEMMs, attention,
// memory-bound ops), of communication (NCCL-style alpha-beta, measured curves), of ranks sharing a machine, and the
// memory model's overheads.
struct CostParams {
#define TPTUNE_COST_PARAM(type, name, value, lo, hi) type name = value
#define TPTUNE_COST_FIELD(type, name, ...) \
  type name { __VA_ARGS__ }
#include "sim/cost/cost_param_list.h"
#undef TPTUNE_COST_PARAM
#undef TPTUNE_COST_FIELD

  // The curve of measured_collectives for collective `k` on a group of `ranks`, or nullptr.
  const MeasuredCollective* measured(CollectiveKind k, int ranks) const;
};

// Bytes per element of `t` as the device stores it (CostParams::float_storage_bytes; int32 and the like unchanged).
inline int stored_bytes_per_element(DType t, const CostParams& c) {
  return c.float_storage_bytes > 0 ? c.float_storage_bytes : bytes_per_element(t);
}
// A byte count of `t` elements (a collective's `bytes`) as the device moves them.
inline int64_t stored_bytes(int64_t bytes, DType t, const CostParams& c) {
  return c.float_storage_bytes > 0 ? bytes / bytes_per_element(t) * c.float_storage_bytes : bytes;
}

// The defaults above (a named constant, so that callers can say what they use).
inline const CostParams& default_cost_params() {
  static const CostParams p;
  return p;
}

}  // namespace tptune
