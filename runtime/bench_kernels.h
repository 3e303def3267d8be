#pragma once
// `tp-run bench memory-bound`: every memory-bound kernel of a training step at one layer's shapes, in GB/s and as a
// percentage of a device-to-device copy of as many bytes measured in the same run (issue 39: each should reach 70 %
// of the copy at 64 MiB and up). Written as bench JSON (runtime/bench.h's header, "bench": "memory-bound"):
//   "data": bench_data_json(seed), "shape": {rows, dim, ffn_dim, vocab, heads, head_dim, dtype, storage},
//   "copy": {"bytes", "time_us", "GBps"}         (one activation, at least 64 MiB: the run's headline copy rate)
//   "results": [{"op", "bytes", "time_us": {...}, "GBps", "copy_GBps" (a copy moving `bytes`: half read, half
//                written), "percent_of_copy", "operands": [...]}]
// Each op and each copy is timed by time_queued_calls (runtime/bench.h): the device's time, with its caches flushed,
// as a step runs it behind the host ("timing"."method" says so), not the host's launch latency.
// Bytes are what the kernel must move at the least: each input read once, each output written once, in the
// backend's storage (the CPU backend stores bf16 as fp32, so its bytes are fp32's). They match the bytes of the
// profile records of the same ops (ElementwiseOp::bytes; runtime/profiler.cc for embedding, cross-entropy and float8
// casts), so a bench and a profile can be read side by side. Scratch a kernel keeps to itself (the RMSNorm backward's
// dw partials, the embedding backward's sort) is not counted: it is the kernel's cost, not the op's traffic.
//   op              shapes (R rows = tokens, D dim, F ffn_dim, V vocab, H heads of head_dim d)      bytes
//   rmsnorm_fwd     x, y (R, D); w (D); rstd (R) fp32                                              2RDe + De + 4R
//   rmsnorm_bwd     x, dy, dx (R, D); w, dw (D); rstd (R)                                           3RDe + 2De + 4R
//   rope_fwd/bwd    x, y (R, H d)                                                                  2RHde
//   residual_add    a, b, y (R, D)                                                                 3RDe
//   swiglu_fwd      a, b, y (R, F)                                                                 3RFe
//   swiglu_bwd      a, b, dy, da, db (R, F)                                                        5RFe
//   ce_row_max      logits (R, V) -> max (R)                                                       RVe + 4R
//   ce_sum_exp      logits, max -> sumexp                                                          RVe + 8R
//   ce_backward     logits, max, sumexp, targets -> d_logits (R, V)                                2RVe + 12R
//   fp8_amax        x (R, D) -> amax                                                               RDe + 4
//   fp8_cast        x (R, D), amax -> xq (R, D) float8, scale                                      RD(e + e8) + 8
//   adamw           p, m, v fp32 read and written, g read: a (F, D) weight                         FD(24 + e)
//   embedding_fwd   ids (R), V x D table -> out (R, D): the R rows read                            4R + 2RDe
//   embedding_bwd   ids, d_out (R, D) -> d_weight (V, D), every row written                        4R + RDe + VDe
// (e: the storage's bytes per element; e8: a float8 element's)

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/bench.h"
#include "runtime/bench_data.h"

namespace tptune {

// One layer's shapes; the defaults are Llama 3 8B's at seq 8192, batch 1, tp 1.
struct MemoryBoundShape {
  int64_t rows = 8192, dim = 4096, ffn_dim = 14336, vocab = 128256, heads = 32, head_dim = 128;
  DType dtype = DType::bf16;
  uint64_t seed = kBenchSeed;
  std::vector<std::string> ops;  // the ops to time (empty: all, in the table's order)
};

// The op names of the table above, in its order.
const std::vector<std::string>& memory_bound_ops();

nlohmann::json bench_memory_bound(Backend& backend, const MemoryBoundShape& shape, const BenchOptions& options);

}  // namespace tptune
