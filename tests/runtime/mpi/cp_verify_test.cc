// Context parallelism verified end to end (mpirun -np 2 and -np 4, tag [cp]): the world is a [cp, tp] mesh with cp 2
// (tp 1 at np 2, tp 2 at np 4; cp 4 x tp 1 for the ring-order case at np 4). Each rank runs its cp rank's Program
// (ring attention's blocks, merges and K/V rotation as lowered by plans/lower/ring.cc) and the unsharded model; the
// verifier compares the summed loss and every gradient. Both rotate methods and both sequence layouts pass; planted
// errors in the Program — a skipped block, a ring that hands a block the wrong step's K/V, FSDP's gradient reduction
// left out — fail.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/verifier.h"
#include "tests/runtime/mpi/mesh.h"

using namespace tptune;
using test::Mesh;
using test::world_size;

namespace {

struct Programs {
  Program sharded, reference;
};

Programs tiny_cp(int cp, CpRotate rotate, bool load_balance, const char* config = "tiny-llama.yaml",
                 Gqa gqa = Gqa::enable_gqa) {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/" + config);
  cfg.model.gqa = gqa;
  Plan base;
  base.tp_degree = world_size() / cp;
  base.local_batch_size = cfg.training.local_batch_size;
  base.loss_parallel = true;
  Plan plan = preset_plan("sequence_parallel", base);
  plan.cp_degree = cp;
  plan.cp_rotate = rotate;
  plan.cp_load_balance = load_balance;
  Plan ref = plan;
  ref.tp_degree = 1;
  ref.cp_degree = 1;
  return {lower(cfg.model, cfg.training, plan), lower(cfg.model, cfg.training, ref)};
}

VerifyReport verify_cp(const Programs& p) {
  Mesh mesh(p.sharded.tp);
  CpuBackend be(mesh.tp, mesh.outer, mesh.outer), local;  // FSDP's group (dp_shard 1 x cp) is the cp group
  return verify_step(p.sharded, p.reference, be, local, 5);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Removes every op whose name ends with `tail` from its segment, renumbering the ops' deps; returns how many.
int erase_ops(Program& p, const std::string& tail) {
  int erased = 0;
  for (Segment& s : p.segments) {
    for (size_t i = 0; i < s.ops.size();) {
      if (!ends_with(s.ops[i].name, tail)) {
        ++i;
        continue;
      }
      s.ops.erase(s.ops.begin() + std::ptrdiff_t(i));
      ++erased;
      for (Op& op : s.ops) {
        std::vector<int> deps;
        for (int d : op.deps)
          if (d != int(i)) deps.push_back(d > int(i) ? d - 1 : d);
        op.deps = deps;
      }
      for (size_t j = 0; j < s.ops.size(); ++j) s.ops[j].id = int(j);
    }
  }
  return erased;
}

Op* find_op(Program& p, const std::string& tail) {
  for (Segment& s : p.segments)
    for (Op& op : s.ops)
      if (ends_with(op.name, tail)) return &op;
  return nullptr;
}

}  // namespace

TEST_CASE("cp 2: both rotate methods and both sequence layouts verify", "[mpi][cp]") {
  for (CpRotate rotate : {CpRotate::allgather, CpRotate::alltoall})
    for (bool balance : {true, false}) {
      INFO("rotate " << to_string(rotate) << ", load balance " << balance);
      const VerifyReport r = verify_cp(tiny_cp(2, rotate, balance));
      CHECK(r.pass());
      CHECK(r.cp == 2);
      CHECK(r.params.size() == 21);
      // sum of the cp shares (CrossEntropyOp::mean_over) == the unsharded mean, to fp32 rounding
      CHECK(r.loss_rel_err < 1e-6);
    }
}

TEST_CASE("cp 2: a model with biases, LayerNorm and GELU verifies", "[mpi][cp]") {
  const VerifyReport r = verify_cp(tiny_cp(2, CpRotate::alltoall, true, "tiny-gpt.yaml"));
  CHECK(r.pass());
}

TEST_CASE("cp 2: repeat_kv's repeated K/V rotate around the ring and verify", "[mpi][cp]") {
  // model.gqa repeat_kv: the ring gathers (allgather) or passes on (alltoall) the K/V with the query heads' count, and
  // dK/dV travel repeated until the last step sums them back; at np 4 tp 2 also splits the heads.
  for (CpRotate rotate : {CpRotate::allgather, CpRotate::alltoall}) {
    INFO("rotate " << to_string(rotate));
    const VerifyReport r = verify_cp(tiny_cp(2, rotate, true, "tiny-llama.yaml", Gqa::repeat_kv));
    CHECK(r.pass());
    CHECK(r.loss_rel_err < 1e-6);
  }
}

TEST_CASE("cp 2: a skipped ring block fails", "[mpi][cp]") {
  Programs p = tiny_cp(2, CpRotate::allgather, true);
  // Without the merge of step 1 the forward never sees the other rank's K/V block: the attention (and so the loss)
  // covers only the local diagonal.
  REQUIRE(erase_ops(p.sharded, ".ring.merge.1") == 1);
  const VerifyReport r = verify_cp(p);
  CHECK_FALSE(r.pass());
  CHECK_FALSE(r.loss_pass);
}

TEST_CASE("cp 2: a ring that does not rotate K/V fails", "[mpi][cp]") {
  Programs p = tiny_cp(2, CpRotate::alltoall, true);
  // Step 1's forward block reads the rank's own K/V buffer (the one step 0 sends on) instead of the received one.
  Op* block = find_op(p.sharded, ".core.fwd.1");
  Op* local = find_op(p.sharded, ".ring.fwd.kv");
  REQUIRE(block != nullptr);
  REQUIRE(local != nullptr);
  REQUIRE(block->inputs.size() == 2);
  block->inputs[1] = local->outputs.at(0);
  CHECK_FALSE(verify_cp(p).pass());
}

TEST_CASE("cp: FSDP's gradient reduction over the cp ranks cannot be left out", "[mpi][cp]") {
  Programs p = tiny_cp(2, CpRotate::allgather, true);
  REQUIRE(erase_ops(p.sharded, "fsdp.reduce_scatter") > 0);
  const VerifyReport r = verify_cp(p);
  CHECK_FALSE(r.pass());
  CHECK(r.loss_pass);  // the forward is right; each rank's gradients are only its tokens' share
}

TEST_CASE("cp 4: blocks computed in the wrong ring order fail", "[mpi][cp]") {
  if (world_size() != 4) return;  // cp 4 x tp 1 needs four ranks
  for (CpRotate rotate : {CpRotate::allgather, CpRotate::alltoall}) {
    INFO("rotate " << to_string(rotate));
    Programs right = tiny_cp(4, rotate, true);
    CHECK(verify_cp(right).pass());
    // Steps 1 and 2 swap the rows they compute (which q and K/V half each rank's step uses, runtime/ring/schedule.h)
    // while keeping the K/V they hold.
    Programs p = tiny_cp(4, rotate, true);
    for (const char* phase : {"fwd", "bwd"}) {
      Op* one = find_op(p.sharded, std::string(".core.") + phase + ".1");
      Op* two = find_op(p.sharded, std::string(".core.") + phase + ".2");
      REQUIRE(one != nullptr);
      REQUIRE(two != nullptr);
      std::swap(std::get<AttentionOp>(one->kind).ring_step, std::get<AttentionOp>(two->kind).ring_step);
    }
    CHECK_FALSE(verify_cp(p).pass());
  }
}
