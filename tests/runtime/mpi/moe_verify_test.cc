// A mixture of experts verified with expert parallelism inside the TP group (mpirun -np 2 and 4;
// examples/tiny-moe.yaml: 8 experts, top 2, a shared expert): ep = world passes (and ep 2 of tp 4, whose experts' FSDP
// group efsdp has 2 ranks), and each planted error fails: a rank holding another rank's experts, a combine whose
// returned rows are not used, tokens dispatched with wrong splits, an expert_bias updated from one rank's tokens.
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/tensor_init.h"
#include "runtime/verifier.h"
#include "tests/runtime/mpi/mesh.h"

using namespace tptune;

namespace {

// The ep group (ep consecutive ranks) and the experts' FSDP group (ranks ep apart) of the world as one TP group, as
// tools/tp_run/backend.h's MeshComms splits them.
struct ExpertGroups {
  MPI_Comm ep = MPI_COMM_NULL, efsdp = MPI_COMM_NULL;
  explicit ExpertGroups(int ep_degree) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, rank / ep_degree, rank, &ep);
    MPI_Comm_split(MPI_COMM_WORLD, rank % ep_degree, rank, &efsdp);
  }
  ~ExpertGroups() {
    MPI_Comm_free(&ep);
    MPI_Comm_free(&efsdp);
  }
  ExpertGroups(const ExpertGroups&) = delete;
  ExpertGroups& operator=(const ExpertGroups&) = delete;
};

struct MoePrograms {
  Program sharded, reference;
};
MoePrograms tiny_moe(int ep) {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-moe.yaml");
  Plan base;
  base.tp_degree = test::world_size();
  base.local_batch_size = cfg.training.local_batch_size;
  base.loss_parallel = true;
  Plan plan = preset_plan("sequence_parallel", base);
  plan.ep_degree = ep;
  Plan ref = plan;
  ref.tp_degree = 1;
  ref.ep_degree = 1;
  return {lower(cfg.model, cfg.training, plan), lower(cfg.model, cfg.training, ref)};
}

VerifyReport verify_moe(const MoePrograms& p, int ep, const std::function<void(Executor&)>& before = nullptr) {
  const ExpertGroups groups(ep);
  CpuBackend be(MPI_COMM_WORLD), local;
  be.set_expert_groups(groups.ep, ep < test::world_size() ? groups.efsdp : MPI_COMM_NULL);
  return verify_step(p.sharded, p.reference, be, local, 5, before);
}

// A planted error: every `reader` op whose first input is the output of a forward collective named `collective`
// (a substring of its name) reads that collective's input instead, as if it were skipped. Returns how many were.
int bypass(Program& p, const std::string& collective, ElementwiseOp::Fn reader) {
  int rewired = 0;
  for (Segment& s : p.segments) {
    std::map<TensorId, TensorId> skipped;  // the collective's output -> its input
    for (Op& op : s.ops) {
      if (op.name.find(collective) != std::string::npos && op.name.find("bwd") == std::string::npos)
        skipped[op.outputs.at(0)] = op.inputs.at(0);
      if (auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == reader)
        if (auto it = skipped.find(op.inputs.at(0)); it != skipped.end()) op.inputs[0] = it->second, ++rewired;
    }
  }
  return rewired;
}

bool expert_failed(const VerifyReport& r) {
  for (const auto& c : r.params)
    if (!c.pass && c.name.find("routed_experts") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("expert parallelism inside the TP group verifies: loss, router, experts and shared expert", "[mpi][verify]") {
  const int world = test::world_size();
  for (int ep : {2, 4}) {
    if (ep > world) continue;
    INFO("tp " << world << " x ep " << ep);
    const MoePrograms p = tiny_moe(ep);
    REQUIRE(p.sharded.ep == ep);
    CHECK(p.sharded.efsdp == world / ep);
    const VerifyReport r = verify_moe(p, ep);
    INFO(format_report(r));
    CHECK(r.pass());
    // 2 blocks x (router gate, w1, w2, w3, shared w1, w2, w3) of the 33 parameters.
    int moe_params = 0;
    for (const auto& c : r.params) moe_params += c.name.find(".moe.") != std::string::npos;
    CHECK(moe_params == 14);
    // Each block's router: the tp ranks' tokens-per-expert histograms sum to the unsharded step's.
    REQUIRE(r.expert_counts.size() == 2);
    for (const auto& c : r.expert_counts) CHECK((c.pass && c.experts == 8 && c.differing == 0));
    CHECK(format_report(r).find("tokens per expert: 2 routers, 2 equal to the unsharded step's  pass") !=
          std::string::npos);
    // And each router's expert_bias after the pre-hook's update (the tp ranks' histograms all-reduced first).
    REQUIRE(r.expert_bias.size() == 2);
    for (const auto& c : r.expert_bias) CHECK((c.pass && c.experts == 8 && c.differing == 0));
    CHECK(format_report(r).find("expert_bias after the update: 2 routers, 2 equal to the unsharded step's  pass") !=
          std::string::npos);
  }
}

TEST_CASE("expert parallelism: an expert_bias updated without the tp sum of tokens per expert fails", "[mpi][verify]") {
  const int ep = test::world_size();
  MoePrograms p = tiny_moe(ep);
  // The update reads the router's own histogram (this rank's tokens) instead of the all-reduced one.
  REQUIRE(bypass(p.sharded, "tokens_per_expert.tp.all_reduce", ElementwiseOp::Fn::moe_bias_update) > 0);
  const VerifyReport r = verify_moe(p, ep);
  CHECK(!r.pass());
  CHECK(r.loss_pass);  // the loss and gradients come before the update: only the buffer is wrong
  CHECK(!expert_failed(r));
  REQUIRE(r.expert_bias.size() == 2);
  for (const auto& c : r.expert_bias) CHECK((!c.pass && c.differing > 0));
  CHECK(format_report(r).find("; expert_bias differs") != std::string::npos);
}

TEST_CASE("expert parallelism: a rank holding another rank's experts fails", "[mpi][verify]") {
  const int ep = test::world_size();
  const MoePrograms p = tiny_moe(ep);
  const VerifyReport r = verify_moe(p, ep, [ep](Executor& ex) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (const auto& prm : ex.parameters()) {
      const TensorDesc& d = ex.desc(prm.value);
      if (!d.expert) continue;
      // The next ep rank's experts instead of its own (the seed verify_moe gives the step).
      auto full = init_parameter(5, prm.name, d.global_shape);
      ex.write(prm.value, shard_of(full, d.global_shape, 0, ep, (rank + 1) % ep));
    }
  });
  CHECK(!r.pass());
  CHECK(!r.loss_pass);
  CHECK(expert_failed(r));
}

TEST_CASE("expert parallelism: a combine whose returned rows are not used fails", "[mpi][verify]") {
  const int ep = test::world_size();
  MoePrograms p = tiny_moe(ep);
  // The combine reads the rows before they are sent back (the combine all-to-all's input, not its output): as if
  // the exchange were skipped. Each rank then weighs the rows its experts computed for other ranks' tokens.
  REQUIRE(bypass(p.sharded, "combine.all_to_all", ElementwiseOp::Fn::moe_combine) > 0);
  const VerifyReport r = verify_moe(p, ep);
  CHECK(!r.pass());
  CHECK(!r.loss_pass);
}

TEST_CASE("expert parallelism: tokens dispatched with wrong splits fail", "[mpi][verify]") {
  const int ep = test::world_size();
  const MoePrograms p = tiny_moe(ep);
  // After the host reads the exchanged counts, one row meant for ep peer 0 goes to peer 1 (the splits' first
  // boundary moved by one row), on every rank.
  const VerifyReport r = verify_moe(p, ep, [ep](Executor& ex) {
    ex.set_after_op([&ex, ep](int op) {
      const FlatOp& f = ex.flat().ops[size_t(op)];
      if (f.name.find("counts.tolist") == std::string::npos) return;
      auto splits = ex.read(f.outputs.at(0));
      REQUIRE(splits.size() == size_t(2 * ep));
      if (splits[0] > 0) splits[0] -= 1, splits[1] += 1;
      ex.write(f.outputs.at(0), splits);
    });
  });
  CHECK(!r.pass());
  CHECK(expert_failed(r));
}

TEST_CASE("the unsharded MoE step's gradients are the loss's slopes (central differences)", "[mpi][verify]") {
  // verify compares the sharded step with the unsharded one, which runs the same MoE code: this checks that code
  // itself, on one rank. For the router gate, an expert (w1, w2) and the shared expert, the element with the largest
  // gradient is moved by +-h and (L(+h) - L(-h)) / 2h compared with the gradient, 5 % of it: fp32 losses of ~6 carry
  // ~1e-6 of rounding, / 2h = 2e-3 -> 5e-4, about 1 % of gradients of ~0.05. A probe whose move changes any token's
  // choice of experts (top-k is not differentiable) is skipped; at least one of each tensor must count.
  const MoePrograms p = tiny_moe(1);
  CpuBackend local;
  ExecutorOptions o;
  o.run_optimizer = false;
  o.update_expert_bias = false;  // the same routing step after step
  Executor ex(p.reference, local, o);
  ex.init(9);
  ex.step();
  std::vector<int> ids;  // every router's expert ids
  for (const FlatOp& f : ex.flat().ops)
    if (auto* e = std::get_if<ElementwiseOp>(&f.op->kind);
        e && e->fn == ElementwiseOp::Fn::moe_router && f.op->phase == Phase::forward)
      ids.push_back(f.outputs.at(1));
  REQUIRE(ids.size() == 2);
  auto routing = [&] {
    std::vector<float> all;
    for (int t : ids) {
      auto v = ex.read(t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<float> chosen = routing();
  const float h = 1e-3f;
  for (const char* name :
       {"layers.1.moe.router.gate.weight", "layers.0.moe.router.gate.weight", "layers.1.moe.routed_experts.w1",
        "layers.0.moe.routed_experts.w2", "layers.0.moe.shared_experts.w3.weight"}) {
    INFO(name);
    Executor::Param prm;
    for (const auto& q : ex.parameters())
      if (q.name == name) prm = q;
    REQUIRE(prm.grad >= 0);
    // Gradients of the unperturbed step (steps below overwrite them).
    ex.step();
    const std::vector<float> g = ex.read(prm.grad), w = ex.read(prm.value);
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::abs(g[a]) > std::abs(g[b]); });
    int counted = 0;
    for (size_t probe = 0; probe < 8 && counted < 2; ++probe) {
      const size_t i = order[probe];
      auto loss_at = [&](float delta) {
        std::vector<float> moved = w;
        moved[i] += delta;
        ex.write(prm.value, moved);
        ex.step();
        return std::pair{double(ex.loss()), routing() == chosen};
      };
      const auto [up, same_up] = loss_at(h);
      const auto [down, same_down] = loss_at(-h);
      ex.write(prm.value, w);
      if (!same_up || !same_down) continue;
      const double slope = (up - down) / (2.0 * h);
      INFO("element " << i << ": gradient " << g[i] << ", central difference " << slope);
      CHECK(std::abs(slope - g[i]) <= 0.05 * std::abs(g[i]));
      ++counted;
    }
    CHECK(counted > 0);
  }
}
