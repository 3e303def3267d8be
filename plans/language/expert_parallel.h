#pragma once
// Expert parallelism (EP): the routed experts of a mixture-of-experts block split over ep ranks, tokens sent to the
// rank of each expert they chose and back by all-to-alls. What tptune models is torchtitan 0.3.0 (the release its
// wheel carries), read in its sources:
//
// The plan key. torchtitan 0.3.0 has one: parallelism.expert_parallel_degree (config/configs.py, default 1), the plan's
// `ep_degree` here. There is no expert-tensor-parallel degree (etp) in 0.3.0: with EP on, routed experts are never
// TP-sharded; with EP off and TP on, they are (below). (torchtitan main has had an `expert_tensor_parallel_degree`, 1
// or tp, and torchtitan/distributed/expert_parallel.py with ExpertTensorParallel; 0.3.0 has neither.)
//
// The sparse mesh (distributed/parallel_dims.py, ParallelDims.build_mesh): the same world as the dense mesh [pp,
// dp_replicate, dp_shard, cp, tp], unflattened as (pp, dp_replicate, efsdp, ep) with efsdp = dp_shard x cp x tp / ep
// (integer division there; _validate_meshes asserts each axis has its size, so ep must divide dp_shard x cp x tp,
// which check_expert_mesh() says in one line). ep is the innermost axis: an ep group is ep consecutive ranks (it
// holds the tp ranks first, then dp ranks); efsdp ranks have stride ep. Routed experts are fully_shard'ed over efsdp
// (their own all-gather and reduce-scatter group), every other parameter over the dense fsdp group (dp_shard x cp).
// Each ep rank holds experts / ep whole experts (GroupedExperts weights (experts, ...) placed Shard(0) on ep,
// models/common/moe_sharding.py), so experts % ep == 0 (torchtitan leaves that to DTensor's uneven sharding, which the
// grouped GEMMs' offsets do not support: tptune refuses it).
//
// The styles (models/common/moe_sharding.py and models/qwen3/parallelize.py, apply under TP, fixed by torchtitan, not
// a user's module plan):
//   moe.router.gate            replicated weight (no TP sharding); EP on: its input is the block's tokens sequence-
//                              sharded over tp (Shard(1): MoE reuses the tp axis to split tokens when EP is on); EP
//                              off: its input is Replicate (the SP region's all-gather before the MoE module)
//   moe.shared_experts         colwise w1/w3 (weight Shard(0), output Shard(2)), rowwise w2 (weight Shard(1), output
//                              Partial, reduced back to the sequence-parallel layout)
//   moe.routed_experts         EP on: w1, w2, w3 Shard(0) on ep (whole experts per rank), not TP-sharded;
//                              EP off with TP: w1/w3 (experts, ffn, dim) Shard(1), w2 (experts, dim, ffn) Shard(2):
//                              the dense TP of each expert on the tp axis, output Partial over tp
//   tokens_per_expert buffer   Partial on dp/cp (and tp when EP on): all-reduced by the optimizer pre-hook that
//                              updates the aux-loss-free expert_bias
// The SP region: the MoE module receives the block's sequence-sharded (S(1)) normed input and returns S(1) as the
// dense feed_forward does in the sequence_parallel plan; with EP on the routed path stays on each tp rank's sequence
// shard, the shared expert (and with EP off the routed experts) all-gather it to Replicate first and reduce-scatter
// their Partial output back.

#include <cstdint>
#include <string>

#include "plans/language/plan_toggles.h"
#include "plans/model/model.h"

namespace tptune {

// The sparse mesh of one plan: ep (PlanToggles::ep_degree) and efsdp = dp_shard x cp x tp / ep; experts_local the
// routed experts one ep rank holds. For a dense model or ep 1: ep 1, efsdp the dense FSDP group (dp_shard x cp),
// experts_local every expert.
struct ExpertMesh {
  int ep = 1;
  int efsdp = 1;
  int64_t experts_local = 0;
};

// torchtitan 0.3.0's rules for ep_degree on model `m` (see above); tptune::Error, one line starting with `where` (the
// key's origin: "plan FILE:LINE", "option --ep", the plan's source) when ep_degree > 1 on a dense model, ep does not
// divide dp_shard x cp x tp, or the experts do not split evenly over ep.
ExpertMesh check_expert_mesh(const Model& m, const PlanToggles& t, const std::string& where);

}  // namespace tptune
