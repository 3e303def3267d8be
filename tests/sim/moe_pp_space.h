#pragma once
// A dense-first mixture of experts' pipeline search space, shared by the search's brute-force and bound tests.
#include <cstdint>
#include <utility>
#include <vector>

#include "tests/fixtures.h"

namespace tptune::test {

// tiny_moe_search_config() with `layers` blocks, the first `dense` of them dense (model.moe.dense_layers), over tp 1, 2
// x ep 1, 2, 4 x pp `pp` x `schedules` x AC none and full x local batch `batches`, the sequence-parallel preset in bf16
// without async TP, no HSDP, no CP.
inline Config tiny_moe_pp_search_config(int64_t layers, int64_t dense, std::vector<int> pp,
                                        std::vector<PipelineScheduleKind> schedules, std::vector<int64_t> batches) {
  Config cfg = tiny_moe_search_config();
  cfg.model.n_layers = layers;
  cfg.model.moe.dense_layers = dense;
  SearchSpace& s = cfg.search;
  s.tp_degrees = {1, 2};
  s.dp_replicate = {1};
  s.cp_degrees = {1};
  s.ep_degrees = {1, 2, 4};
  s.pp_degrees = std::move(pp);
  s.pp_schedules = std::move(schedules);
  s.float8 = {Float8Recipe::none};
  s.async_tp = {false};
  s.local_batch_sizes = std::move(batches);
  return cfg;
}

}  // namespace tptune::test
