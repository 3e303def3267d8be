#pragma once
// Why a search candidate cannot run, decided as cheaply as possible, with a reason the report counts.
//
// Static reasons (before lowering; each is a case the lowering, the cluster layout or the cost model would refuse,
// which the search tests check against the brute-force path):
//   tp does not divide the world size          dp_shard = world / tp must be whole
//   tp x dp_replicate does not divide the world size
//                                              HSDP: dp_shard = world / (tp x dp_replicate) must be whole
//   local batch x dp is not the global batch   search.global_batch_size: local_batch_size x dp_shard x dp_replicate
//                                              must equal it
//   global batch is not a multiple of local batch x dp
//                                              search.gradient_accumulation true: global_batch_size must be a
//                                              multiple of local_batch_size x dp_shard x dp_replicate (torchtitan's
//                                              assertion); the quotient is the candidate's gradient_accumulation_steps
//   tp group straddles nodes                   tp and gpus_per_node must divide one another (sim/cluster_spec.h)
//   dp_replicate with dp_shard 1 (DDP)         the DTensor family: torchtitan applies DDP, not HSDP, when dp_shard is
//                                              1 (the lowering refuses it; plans/lower/lower.cc)
//   float8 needs a GPU with float8             the GPU spec has no fp8 peak (A100)
//   tp does not divide n_heads | n_kv_heads | ffn_dim | vocab_size
//                                              presets shard attention heads (wq/wk/wv colwise), the MLP hidden dim
//                                              and the vocabulary (embedding rowwise, output colwise) over tp
//   tp does not divide seq_len (sequence parallel)
//                                              the sequence-parallel preset shards the residual stream on the sequence
//                                              (the candidate's seq_len, one of search.seq_lens)
//   async TP needs sequence parallel           vanilla has no all-gather / reduce-scatter to pipeline
//   stages per rank do not suit the schedule   a pipeline candidate's stages per rank (search.pp_stages_per_rank; 0:
//                                              the schedule's default) other than 1 with GPipe or 1F1B, other than 2
//                                              with ZBVZeroBubble or DualPipeV, below 2 with the looped schedules
//                                              (resolve_pipeline(), plans/language/pipeline_parallel.h, refuses them
//                                              alike)
//   more pipeline stages than layers           pp x stages per rank above the effective layers (n_layers +
//                                              first and last stage less layers: torchtitan's default split refuses)
//   mixture of experts (model.moe)             ep does not divide the routed experts, or dp_shard x cp x tp (the
//                                              sparse mesh, plans/language/expert_parallel.h); pipeline parallelism,
//                                              async TP or float8 tensorwise (not lowered for MoE); with ep 1 and tp,
//                                              tp not dividing expert_ffn_dim; tp not dividing shared_ffn_dim; with
//                                              ep > 1 and tp, tp not dividing seq_len / cp (the router's Shard(1)
//                                              input): each as plans/lower/input_checks.cc refuses it, whatever the
//                                              family (a MoE model's dense `ffn` rule does not apply: no dense MLP)
//   redundant at tp 1                          without TP, async TP, loss parallel and the module plan change nothing:
//                                              the candidate's Program is that of its representative (first family,
//                                              first async and loss-parallel values of the space), which is evaluated
// Late reasons: `out of memory` (peak + memory_headroom_gib > capacity), `below min tokens/s`
// (search.min_tokens_per_second_per_gpu, after the simulation), and any tptune::Error of the lowering or
// the cost model, counted by its class (error_reason()). Each reason is a PruneReason (sim/search/prune_reason.h).

#include <string>

#include "plans/language/config.h"
#include "sim/cluster_spec.h"
#include "sim/search/prune_reason.h"
#include "sim/search/space.h"

namespace tptune {

struct Verdict {
  PruneReason reason = PruneReason::none;  // a static reason, or none when the candidate passes
  std::string detail;                      // one line with the numbers ("tp 16 vs n_kv_heads 8")
  bool ok() const { return reason == PruneReason::none; }
};

// The static checks above, in that order (the first failing one is the reason). `with_detail` false: the verdict's
// detail is left empty (the reason alone, without formatting it: the search's count of a pruned candidate).
Verdict check_static(const Config& cfg, const ClusterSpec& cluster, const ResolvedSpace& s, const Candidate& c,
                     bool with_detail = true);

// The representative of a tp-1 candidate (the one whose Program it shares); `c` itself when tp > 1 or when it is
// its own representative.
Candidate tp1_representative(const ResolvedSpace& s, const Candidate& c);

// The cause of a lowering or simulation error (`stage`: PruneReason::lowering or ::simulation) with the class of its
// message, for counting: the plan's source prefix dropped, the module and the first clause kept, numbers replaced by
// N. "layers.0.attention.wk: tp 16 does not divide the 8 heads: ..." -> class "layers.N.attention.wk: tp N does not
// divide the N heads", printed "lowering: layers.N.attention.wk: tp N does not divide the N heads".
PruneCause error_reason(PruneReason stage, const std::string& message, const std::string& plan_source);

}  // namespace tptune
