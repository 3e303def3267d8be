#include "sim/search/prune_reason.h"

#include <ostream>

#include "plans/util/enum_names.h"

namespace tptune {

// PruneReason's enumerators, in declaration order.
constexpr std::string_view kPruneReasonNames[] = {
    "",
    "tp does not divide the world size",
    "tp x dp_replicate does not divide the world size",
    "search.global_batch_size is not a multiple of local batch x dp (gradient accumulation)",
    "local batch x dp is not search.global_batch_size",
    "tp group straddles nodes (tp and gpus_per_node do not divide one another)",
    "dp_replicate with dp_shard 1 is DDP (not modelled)",
    "float8 needs a GPU with float8",
    "tp does not divide n_heads",
    "tp does not divide n_kv_heads",
    "tp does not divide ffn_dim",
    "tp does not divide vocab_size",
    "tp does not divide seq_len (sequence parallel)",
    "2 x cp (x tp with sequence parallel) does not divide seq_len (context parallel)",
    "async TP needs sequence parallel",
    "stages per rank do not suit the pipeline schedule (GPipe, 1F1B: 1; ZBVZeroBubble, DualPipeV: 2; looped: >= 2)",
    "more pipeline stages than effective layers (blocks + first and last stage less layers)",
    "ep does not divide the routed experts (whole experts per ep rank)",
    "ep does not divide dp_shard x cp x tp (the sparse mesh's efsdp)",
    "async TP with a mixture-of-experts model (not lowered)",
    "float8 tensorwise with a mixture-of-experts model (its grouped GEMMs run rowwise recipes only)",
    "tp does not divide expert_ffn_dim (ep 1: every expert TP-sharded)",
    "tp does not divide shared_ffn_dim",
    "tp does not divide a rank's tokens per sequence (ep > 1: the router's input is Shard(1) over tp)",
    "ac_layers with dense first blocks (model.moe.dense_layers: each block variant is checkpointed whole)",
    "redundant at tp 1 (same program as another candidate)",
    "out of memory (with the headroom)",
    "below search.min_tokens_per_second_per_gpu",
    "bound",
    "lowering",
    "simulation"};
static_assert(std::size(kPruneReasonNames) == enum_count(PruneReason::simulation));

std::string_view to_string(PruneReason r) { return name_of(kPruneReasonNames, r); }

std::string to_string(const PruneCause& c) {
  std::string s(to_string(c.reason));
  if (!c.error_class.empty()) s += ": " + c.error_class;
  return s;
}

std::ostream& operator<<(std::ostream& out, const PruneCause& c) { return out << to_string(c); }

}  // namespace tptune
