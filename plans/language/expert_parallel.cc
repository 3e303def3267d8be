#include "plans/language/expert_parallel.h"

#include <fmt/format.h>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune {

ExpertMesh check_expert_mesh(const Model& m, const PlanToggles& t, const std::string& where) {
  ExpertMesh x;
  x.experts_local = m.moe.experts;
  x.efsdp = static_cast<int>(checked_mul(int64_t{t.dp_shard}, int64_t{t.cp_degree}, "dp_shard x cp"));
  if (t.ep_degree < 1) throw Error(fmt::format("{}: ep_degree: expected >= 1, got {}", where, t.ep_degree));
  if (t.ep_degree == 1) return x;
  if (m.moe.experts == 0)
    throw Error(
        fmt::format("{}: ep_degree {}: the model has no routed experts (model.moe); expected 1", where, t.ep_degree));
  const int64_t dense =
      checked_mul({int64_t{t.dp_shard}, int64_t{t.cp_degree}, int64_t{t.tp_degree}}, "dp_shard x cp x tp");
  if (dense % t.ep_degree != 0)
    throw Error(
        fmt::format("{}: ep_degree {} does not divide dp_shard {} x cp {} x tp {} = {}: torchtitan's sparse "
                    "mesh (pp, dp_replicate, efsdp, ep) needs efsdp = dp_shard x cp x tp / ep whole "
                    "(distributed/parallel_dims.py)",
                    where, t.ep_degree, t.dp_shard, t.cp_degree, t.tp_degree, dense));
  if (m.moe.experts % t.ep_degree != 0)
    throw Error(
        fmt::format("{}: ep_degree {} does not divide the model's {} routed experts: each ep rank holds "
                    "experts / ep whole experts (GroupedExperts Shard(0) on ep)",
                    where, t.ep_degree, m.moe.experts));
  x.ep = t.ep_degree;
  x.efsdp = static_cast<int>(dense / t.ep_degree);
  x.experts_local = m.moe.experts / t.ep_degree;
  return x;
}

}  // namespace tptune
