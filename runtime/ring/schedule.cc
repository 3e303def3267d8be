// The ring attention schedule; see schedule.h.
#include "runtime/ring/schedule.h"

#include <fmt/format.h>

#include "plans/util/error.h"

namespace tptune {

RingStep ring_step(int rank, int cp, int step, SeqLayout layout, int64_t s_local) {
  if (cp <= 0 || rank < 0 || rank >= cp || step < 0 || step >= cp || s_local <= 0 ||
      (layout == SeqLayout::head_tail && s_local % 2 != 0))
    throw Error(fmt::format("ring attention: no step {} of rank {} on a ring of {} with {} local rows ({} layout)",
                            step, rank, cp, s_local, seq_layout_name(layout)));
  RingStep s;
  s.source = ((rank - step) % cp + cp) % cp;
  s.q_len = s.kv_len = s_local;
  if (step == 0) {
    s.mask = kernels::BlockMask::causal;  // _CausalBehavior.IS_CAUSAL on the local q, k, v
    return s;
  }
  s.mask = kernels::BlockMask::full;  // _CausalBehavior.NOT_IS_CAUSAL
  if (layout == SeqLayout::contiguous) {
    s.skip = s.source > rank;  // _CausalBehavior.SKIP
    return s;
  }
  const int64_t chunk = s_local / 2;
  if (step <= rank) {
    s.kv_len = chunk;  // key.chunk(2)[0]
  } else {
    s.q_begin = chunk;  // query.chunk(2)[1], partial
    s.q_len = chunk;
  }
  return s;
}

}  // namespace tptune
