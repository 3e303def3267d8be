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
//                                              1 (the lowering refuses it; plans/lower.cc)
//   float8 needs a GPU with float8             the GPU spec has no fp8 peak (A100)
//   tp does not divide n_heads | n_kv_heads | ffn_dim | vocab_size
//                                              presets shard attention heads (wq/wk/wv colwise), the MLP hidden dim
//                                              and the vocabulary (embedding rowwise, output colwise) over tp
//   tp does not divide seq_len (sequence parallel)
//                                              the sequence-parallel preset shards the residual stream on the sequence
//                                              (the candidate's seq_len, one of search.seq_lens)
//   async TP needs sequence parallel           vanilla has no all-gather / reduce-scatter to pipeline
//   async TP with float8 rowwise               not a combination torchtitan runs (the lowering refuses it)
//   redundant at tp 1                          without TP, async TP, loss parallel and the module plan change nothing:
//                                              the candidate's Program is that of its representative (first family,
//                                              first async and loss-parallel values of the space), which is evaluated
// Late reasons: `out of memory` (peak + memory_headroom_gib > capacity), `below min tokens/s`
// (search.min_tokens_per_second_per_gpu, after the simulation), and any tptune::Error of the lowering or
// the cost model, counted by its class (lowering_reason()).

#include <string>

#include "plans/config.h"
#include "sim/cluster_spec.h"
#include "sim/search/space.h"

namespace tptune {

namespace prune {
inline constexpr const char* kWorld = "tp does not divide the world size";
inline constexpr const char* kReplicateWorld = "tp x dp_replicate does not divide the world size";
inline constexpr const char* kReplicateDdp = "dp_replicate with dp_shard 1 is DDP (not modelled)";
inline constexpr const char* kGlobalBatch = "local batch x dp is not search.global_batch_size";
inline constexpr const char* kGlobalBatchMultiple =
    "search.global_batch_size is not a multiple of local batch x dp (gradient accumulation)";
inline constexpr const char* kStraddle = "tp group straddles nodes (tp and gpus_per_node do not divide one another)";
inline constexpr const char* kFloat8Gpu = "float8 needs a GPU with float8";
inline constexpr const char* kHeads = "tp does not divide n_heads";
inline constexpr const char* kKvHeads = "tp does not divide n_kv_heads";
inline constexpr const char* kFfn = "tp does not divide ffn_dim";
inline constexpr const char* kVocab = "tp does not divide vocab_size";
inline constexpr const char* kSeq = "tp does not divide seq_len (sequence parallel)";
inline constexpr const char* kAsyncNeedsSp = "async TP needs sequence parallel";
inline constexpr const char* kAsyncRowwise = "async TP with float8 rowwise is not supported";
inline constexpr const char* kRedundant = "redundant at tp 1 (same program as another candidate)";
inline constexpr const char* kMemory = "out of memory (with the headroom)";
inline constexpr const char* kMinThroughput = "below search.min_tokens_per_second_per_gpu";
// Branch-and-bound (SearchOptions::bound_top; sim/search/bound.h): its step-time lower bound shows that it is neither
// in the top k nor on the Pareto front, so it is not scheduled.
inline constexpr const char* kBound = "bound";
}  // namespace prune

struct Verdict {
  const char* reason = nullptr;  // one of prune::k*, or nullptr when the candidate passes
  std::string detail;            // one line with the numbers ("tp 16 vs n_kv_heads 8")
  bool ok() const { return reason == nullptr; }
};

// The static checks above, in that order (the first failing one is the reason).
Verdict check_static(const Config& cfg, const ClusterSpec& cluster, const ResolvedSpace& s, const Candidate& c);

// The representative of a tp-1 candidate (the one whose Program it shares); `c` itself when tp > 1 or when it is
// its own representative.
Candidate tp1_representative(const ResolvedSpace& s, const Candidate& c);

// The class of a lowering or simulation error message, for counting: the plan's source prefix dropped, the module
// and the first clause kept, numbers replaced by N. "layers.0.attention.wk: tp 16 does not divide the 8 heads: ..."
// -> "lowering: layers.N.attention.wk: tp N does not divide the N heads".
std::string error_reason(const std::string& stage, const std::string& message, const std::string& plan_source);

}  // namespace tptune
