// The verifier and the profiler on MPI_COMM_WORLD (mpirun -np 2 and 4): a correct float8 + async TP plan passes, a
// float8 Program whose amax all-reduces were removed fails naming the casts, a NaN fails on every rank alike, and a
// profile has one record per op of the expanded Program, in order.
#include "runtime/verifier.h"

#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"

using namespace tptune;

namespace {
int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

struct Programs {
  Program sharded, reference;
};
Programs tiny(const char* preset, Float8Recipe f8, bool async_tp, const char* config = "tiny-llama.yaml",
              Gqa gqa = Gqa::enable_gqa) {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/" + config);
  cfg.model.gqa = gqa;
  Plan base;
  base.tp_degree = world_size();
  base.local_batch_size = cfg.training.local_batch_size;
  base.float8 = f8;
  base.async_tp = async_tp;
  base.loss_parallel = true;
  Plan plan = preset_plan(preset, base);
  Plan ref = plan;
  ref.tp_degree = 1;
  ref.async_tp = false;
  return {lower(cfg.model, cfg.training, plan), lower(cfg.model, cfg.training, ref)};
}
}  // namespace

TEST_CASE("float8 tensorwise with async TP verifies, every cast checked", "[mpi][verify]") {
  auto p = tiny("sequence_parallel", Float8Recipe::tensorwise, true);
  CpuBackend be(MPI_COMM_WORLD), local;
  VerifyReport r = verify_step(p.sharded, p.reference, be, local, 3);
  CHECK(r.pass());
  CHECK(r.params.size() == 21);
  CHECK(!r.casts.empty());
  CHECK(r.unmatched_casts.empty());
  for (const auto& c : r.casts) {
    INFO(c.tensor << ": " << c.problem);
    CHECK(c.pass);
    CHECK(c.rank_scale_spread == 0.0);
  }
}

TEST_CASE("repeat_kv on tp-sharded heads verifies, plain and float8 with async TP", "[mpi][verify]") {
  // Each rank copies its own kv heads to its own query heads (tp 2: 2 kv heads to 4; tp 4: 1 to 2).
  for (bool f8 : {false, true}) {
    INFO("float8 " << f8);
    auto p = tiny("sequence_parallel", f8 ? Float8Recipe::tensorwise : Float8Recipe::none, f8, "tiny-llama.yaml",
                  Gqa::repeat_kv);
    CpuBackend be(MPI_COMM_WORLD), local;
    const VerifyReport r = verify_step(p.sharded, p.reference, be, local, 3);
    CHECK(r.pass());
    CHECK(r.params.size() == 21);
  }
}

TEST_CASE("a float8 Program without its amax all-reduces fails, naming the casts", "[mpi][verify]") {
  auto p = tiny("sequence_parallel", Float8Recipe::tensorwise, false);
  // Move every amax all-reduce (max) to the DP group, which has one rank here: each rank keeps its local amax, as
  // if the reduction had been forgotten. The op list is otherwise unchanged.
  int moved = 0;
  for (Segment& s : p.sharded.segments)
    for (Op& op : s.ops)
      if (auto* c = std::get_if<CollectiveOp>(&op.kind);
          c && c->reduce == ReduceOp::max && op.name.find("amax") != std::string::npos) {
        c->group = Group::dp;
        ++moved;
      }
  REQUIRE(moved > 0);
  CpuBackend be(MPI_COMM_WORLD), local;
  VerifyReport r = verify_step(p.sharded, p.reference, be, local, 1);
  CHECK(!r.pass());
  int per_rank_scales = 0;
  for (const auto& c : r.casts)
    if (!c.pass && c.problem.find("was not all-reduced") != std::string::npos) ++per_rank_scales;
  CHECK(per_rank_scales > 0);
  CHECK(format_report(r).find("float8 casts differ: ") != std::string::npos);
}

TEST_CASE("a NaN on one rank fails the same way on every rank", "[mpi][verify]") {
  auto p = tiny("vanilla", Float8Recipe::none, false, "tiny-gpt.yaml");
  CpuBackend be(MPI_COMM_WORLD), local;
  VerifyReport r = verify_step(p.sharded, p.reference, be, local, 1, [](Executor& ex) {
    if (world_rank() != world_size() - 1) return;
    for (const auto& prm : ex.parameters())
      if (prm.name == "layers.0.feed_forward.w2.weight") {
        auto w = ex.read(prm.value);
        w[0] = std::numeric_limits<float>::quiet_NaN();
        ex.write(prm.value, w);
      }
  });
  CHECK(!r.pass());
  CHECK(!r.loss_pass);
  int nan_params = 0;
  for (const auto& c : r.params) nan_params += c.problem.find("NaN") != std::string::npos;
  CHECK(nan_params > 0);
  // Every rank reached the same verdict (the report is built from gathered data).
  int fails = r.pass() ? 0 : 1, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(all == world_size());
}

TEST_CASE("a profile has one record per op of the expanded Program", "[mpi][profile]") {
  auto p = tiny("sequence_parallel", Float8Recipe::none, true);
  CpuBackend be(MPI_COMM_WORLD);
  nlohmann::json prof = profile_json(profile_program(p.sharded, be, {1, 3, 1}));
  FlatProgram flat = expand(p.sharded);
  const auto& ops = prof["ops"];
  REQUIRE(ops.size() == flat.ops.size());
  for (size_t i = 0; i < flat.ops.size(); ++i) {
    INFO(flat.ops[i].name);
    CHECK(ops[i]["index"] == i);
    CHECK(ops[i]["name"] == flat.ops[i].name);
    CHECK(ops[i]["kind"] == std::string(kind_name(flat.ops[i].op->kind)));
    CHECK(ops[i]["inputs"].size() == flat.ops[i].inputs.size());
    CHECK(ops[i]["outputs"].size() == flat.ops[i].outputs.size());
    CHECK(ops[i]["samples_us"].size() == 3);
    CHECK(ops[i]["time_us"]["min"].get<double>() <= ops[i]["time_us"]["median"].get<double>());
    CHECK(ops[i]["time_us"]["median"].get<double>() <= ops[i]["time_us"]["max"].get<double>());
  }
  CHECK(prof["environment"]["ranks"] == world_size());
  CHECK(prof["program"]["tp"] == world_size());
  CHECK(prof["final_loss"].is_number());
  // Async TP: the ring steps are there as p2p collectives with their chunk.
  int ring = 0;
  for (const auto& op : ops) ring += op.contains("chunk") && op["kind"] == "collective";
  CHECK(ring > 0);
}

TEST_CASE("async TP ring steps are in flight while the previous chunk's gemm runs", "[mpi][executor]") {
  auto p = tiny("sequence_parallel", Float8Recipe::none, true);
  CpuBackend be(MPI_COMM_WORLD);
  Executor ex(p.sharded, be, {false, {}});
  ex.init(1);
  int chunk_gemms = 0, overlapped = 0;
  ex.set_after_op([&](int i) {
    const FlatOp& op = ex.flat().ops[size_t(i)];
    const ChunkRef& c = op.op->chunk;
    // In an all-gather ring the p2p of step j+1 is issued before the gemms of chunk j (for j + 1 < tp).
    if (std::holds_alternative<GemmOp>(op.op->kind) && c.pattern == ChunkRef::Pattern::all_gather &&
        c.step + 1 < c.count) {
      ++chunk_gemms;
      overlapped += ex.pending_collectives() > 0;
    }
  });
  ex.step();
  CHECK(chunk_gemms > 0);
  CHECK(overlapped == chunk_gemms);
  CHECK(ex.pending_collectives() == 0);  // all completed by the end of the step
}
