#include "sim/search/prune_reason.h"

#include <ostream>

namespace tptune {

std::string_view to_string(PruneReason r) {
  switch (r) {
    case PruneReason::none:
      return "";
    case PruneReason::world:
      return "tp does not divide the world size";
    case PruneReason::replicate_world:
      return "tp x dp_replicate does not divide the world size";
    case PruneReason::global_batch_multiple:
      return "search.global_batch_size is not a multiple of local batch x dp (gradient accumulation)";
    case PruneReason::global_batch:
      return "local batch x dp is not search.global_batch_size";
    case PruneReason::straddle:
      return "tp group straddles nodes (tp and gpus_per_node do not divide one another)";
    case PruneReason::replicate_ddp:
      return "dp_replicate with dp_shard 1 is DDP (not modelled)";
    case PruneReason::float8_gpu:
      return "float8 needs a GPU with float8";
    case PruneReason::heads:
      return "tp does not divide n_heads";
    case PruneReason::kv_heads:
      return "tp does not divide n_kv_heads";
    case PruneReason::ffn:
      return "tp does not divide ffn_dim";
    case PruneReason::vocab:
      return "tp does not divide vocab_size";
    case PruneReason::seq:
      return "tp does not divide seq_len (sequence parallel)";
    case PruneReason::async_needs_sp:
      return "async TP needs sequence parallel";
    case PruneReason::async_rowwise:
      return "async TP with float8 rowwise is not supported";
    case PruneReason::redundant:
      return "redundant at tp 1 (same program as another candidate)";
    case PruneReason::memory:
      return "out of memory (with the headroom)";
    case PruneReason::min_throughput:
      return "below search.min_tokens_per_second_per_gpu";
    case PruneReason::bound:
      return "bound";
    case PruneReason::lowering:
      return "lowering";
    case PruneReason::simulation:
      return "simulation";
  }
  return "?";
}

std::string to_string(const PruneCause& c) {
  std::string s(to_string(c.reason));
  if (!c.error_class.empty()) s += ": " + c.error_class;
  return s;
}

std::ostream& operator<<(std::ostream& out, const PruneCause& c) { return out << to_string(c); }

}  // namespace tptune
