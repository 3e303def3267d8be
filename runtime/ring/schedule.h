#pragma once
// Which attention block a rank computes at each step of ring attention, exactly as PyTorch's
// `_templated_ring_attention` and `_templated_ring_attention_backward` choose it
// (torch/distributed/tensor/experimental/_context_parallel/_attention.py: `_is_causal_behavior` and the
// if / elif / else on i == 0, i <= rank, i > rank). Causal attention only (torch refuses load balancing without it).
//
// At step i (0 <= i < cp) rank r holds the key/value shard of rank (r - i) mod cp (the ring passes k/v to rank
// r + 1; the all-gather rotater indexes the gathered shards the same way). Local shards have s_local rows.
//   step 0: the local q against the local k/v with the causal mask on the local diagonal (both layouts: under
//           head_tail the local rows are chunk r then chunk 2cp-1-r, and local order is global order).
//   contiguous layout, i > 0: the source's rows all precede rank r's if source < r: all q against all k/v, no
//           mask; otherwise they all follow: skipped.
//   head_tail layout, i > 0 (chunk size c = s_local / 2):
//     i <= r (source < r): both local q chunks see all of the source's head chunk and none of its tail chunk:
//           all q rows against k/v rows [0, c), no mask;
//     i > r  (source > r): the head q chunk sees nothing of the source; the tail q chunk sees both of its chunks:
//           q rows [c, 2c) against all k/v rows, no mask (torch's `partial` merge into the second half of out/lse).
// Every causal (query, key) pair of the sequence is computed at exactly one (rank, step): tests/runtime prove it for
// cp 1-8 by counting. Torch's own choices, recorded by running its _templated_ring_attention on gloo
// (tests/runtime/check_ring_schedule.py: cp 2-4, both layouts, both rotate methods, 58 (rank, step) blocks in
// tests/runtime/ring_schedule_torch.txt), are equal to ring_step()'s (tests/runtime/ring_schedule_test.cc).

#include <cstdint>

#include "kernels/cpu/attention_block.h"
#include "runtime/ring/cp_layout.h"

namespace tptune {

struct RingStep {
  int source = 0;     // the rank whose k/v shard this rank holds at this step
  bool skip = false;  // nothing of that shard is visible
  kernels::BlockMask mask = kernels::BlockMask::full;
  int64_t q_begin = 0, q_len = 0;    // local q rows used (also the rows of o, lse, d_o, dq touched)
  int64_t kv_begin = 0, kv_len = 0;  // local k/v rows used of the held shard (also the rows of dk, dv touched)
};

// Step `step` of rank `rank` on a ring of `cp` ranks whose shards have `s_local` rows (even under head_tail).
RingStep ring_step(int rank, int cp, int step, SeqLayout layout, int64_t s_local);

}  // namespace tptune
