#pragma once
// Why the search pruned a candidate, as a value: results hold it, the search compares and counts it, and only the
// reports print it (to_string(); the texts are those the search has always printed). The static reasons are decided
// before lowering (sim/search/constraints.h says what each checks); the late ones after it.

#include <compare>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tptune {

enum class PruneReason : uint8_t {
  none,  // not pruned: feasible
  // Static (sim/search/constraints.h, in the order check_static() tries them).
  world,                  // tp does not divide the world size
  replicate_world,        // tp x dp_replicate does not divide the world size
  global_batch_multiple,  // search.global_batch_size is not a multiple of local batch x dp (gradient accumulation)
  global_batch,           // local batch x dp is not search.global_batch_size
  straddle,               // tp group straddles nodes
  replicate_ddp,          // dp_replicate with dp_shard 1 is DDP (not modelled)
  float8_gpu,             // float8 needs a GPU with float8
  heads,                  // tp does not divide n_heads
  kv_heads,               // tp does not divide n_kv_heads
  ffn,                    // tp does not divide ffn_dim
  vocab,                  // tp does not divide vocab_size
  seq,                    // tp does not divide seq_len (sequence parallel)
  cp_seq,                 // the sequence does not split into 2 x cp chunks (x tp with sequence parallel)
  async_needs_sp,         // async TP needs sequence parallel
  pp_stages_schedule,     // the pipeline schedule does not take that many stages per rank
  pp_stages_layers,       // more pipeline stages (pp x stages per rank) than the model's effective layers
  // A mixture-of-experts model (model.moe; plans/language/expert_parallel.h, plans/lower/input_checks.cc check_moe()).
  ep_experts,         // ep does not divide the routed experts
  ep_mesh,            // ep does not divide dp_shard x cp x tp (the sparse mesh's efsdp)
  moe_async_tp,       // async TP with a MoE model (not lowered)
  moe_float8,         // float8 tensorwise with a MoE model (its grouped GEMMs run rowwise recipes only)
  expert_ffn,         // ep 1 with tp: tp does not divide expert_ffn_dim (experts TP-sharded)
  shared_ffn,         // tp does not divide shared_ffn_dim
  moe_router_tokens,  // ep > 1 with tp: tp does not divide a rank's tokens per sequence (the router's Shard(1) input)
  // search.ac_layers' block counts of a model with dense first blocks (model.moe.dense_layers: each block variant is
  // checkpointed whole, plans/lower/input_checks.h check_dense_first_ac_layers()); the ac_layers sweep counts them
  moe_dense_ac_layers,
  redundant,  // redundant at tp 1 (same program as another candidate)
  // Late.
  memory,          // out of memory (peak + search.memory_headroom_gib > capacity)
  min_throughput,  // below search.min_tokens_per_second_per_gpu
  // Branch-and-bound (SearchOptions::bound_top; sim/search/bound.h): its step-time lower bound shows that it is
  // neither in the top k nor on the Pareto front, so it is not scheduled.
  bound,
  lowering,    // the lowering threw tptune::Error (PruneCause::error_class says which kind)
  simulation,  // the cost model threw tptune::Error
};

// Whether `r` is a static reason (decided by check_static() before lowering: world .. redundant above). The search
// counts the candidates these prune without keeping a result (sim/search/candidate_results.h).
constexpr bool is_static(PruneReason r) { return r >= PruneReason::world && r <= PruneReason::redundant; }

// The printed text: "tp does not divide the world size", "out of memory (with the headroom)", "bound", "lowering".
std::string_view to_string(PruneReason r);

// A reason as the search counts it: for `lowering` and `simulation` with the class of the error (error_reason(),
// sim/search/constraints.h: "layers.N.attention.wk: tp N does not divide the N heads"), so that each kind of error is
// counted apart; empty for the others. Ordered by (reason, class): a map of counts lists them in that order, and a
// report that wants them by text sorts them (to_string()).
struct PruneCause {
  PruneReason reason = PruneReason::none;
  std::string error_class;

  PruneCause() = default;
  PruneCause(PruneReason r) : reason(r) {}  // NOLINT(google-explicit-constructor): a reason is a cause
  PruneCause(PruneReason r, std::string cls) : reason(r), error_class(std::move(cls)) {}
  bool operator==(const PruneCause&) const = default;
  std::strong_ordering operator<=>(const PruneCause&) const = default;
  bool operator==(PruneReason r) const { return reason == r; }  // whatever the class
  bool none() const { return reason == PruneReason::none; }
};

// "lowering: <class>" for an error, to_string(reason) otherwise; empty for PruneReason::none.
std::string to_string(const PruneCause& c);
std::ostream& operator<<(std::ostream& out, const PruneCause& c);  // to_string(c), for test messages

}  // namespace tptune
