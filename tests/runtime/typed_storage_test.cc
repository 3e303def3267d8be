// Typed storage in the Backend (runtime/backend.h) and the single-GPU profiling mode, on the CPU backend.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "tests/fixtures.h"

using namespace tptune;

TEST_CASE("storages: element sizes, names, typed pointer offsets", "[runtime][storage]") {
  CHECK(storage_bytes(Storage::f32) == 4);
  CHECK(storage_bytes(Storage::bf16) == 2);
  CHECK(storage_bytes(Storage::fp8_e4m3) == 1);
  CHECK(storage_bytes(Storage::fp8_e5m2) == 1);
  CHECK(storage_bytes(Storage::i32) == 4);
  CHECK(to_string(Storage::fp8_e5m2) == "fp8_e5m2");
  char base[64];
  // 3 bf16 elements on are 6 bytes; 5 float8 elements 5 bytes; the storage travels with the pointer.
  DevPtr p(base, Storage::bf16);
  CHECK(static_cast<char*>(p.at(3).ptr) - base == 6);
  CHECK(p.at(3).storage == Storage::bf16);
  CHECK(static_cast<char*>(DevPtr(base, Storage::fp8_e4m3).at(5).ptr) - base == 5);
  float f[4];
  DevPtr q(f);  // a float* is an f32 pointer
  CHECK(q.storage == Storage::f32);
  CHECK(q.at(2).f32("test") == f + 2);
}

TEST_CASE("the CPU backend stores every float as fp32 and refuses other storages in one line", "[runtime][storage]") {
  CpuBackend be;
  for (DType t : {DType::bf16, DType::fp32, DType::fp8_e4m3, DType::fp8_e5m2}) CHECK(be.storage_for(t) == Storage::f32);
  Buffer b = be.alloc(4, Storage::bf16);
  std::vector<float> host(4, 1.0f);
  CHECK_THROWS_WITH(be.upload(b.ptr(), host.data(), 4),
                    "cpu backend: upload: expected an f32 tensor, got bf16 storage");
  Buffer x = be.alloc(4, Storage::f32), y = be.alloc(4, Storage::fp8_e4m3);
  CHECK_THROWS_WITH(be.add(4, x.ptr(), x.ptr(), y.ptr()),
                    "cpu backend: add: expected an f32 tensor, got fp8_e4m3 storage");
}

TEST_CASE("local shapes of tp 2 on one process: rank 0's compute runs, collectives are recorded as not measured",
          "[runtime][profile]") {
  CpuBackend be;  // a TP group of one
  const Program p = test::lower_example("tiny-llama.yaml", "sequence_parallel", {.tp_degree = 2});
  ProfileOptions o;
  o.warmup = 0, o.iters = 1, o.local_shapes_of_tp = 2;
  auto j = profile_json(profile_program(p, be, o));
  CHECK(j["local_shapes_of_tp"] == 2);
  CHECK(j["collectives"].get<std::string>().find("not run") != std::string::npos);
  CHECK(j["collectives"].get<std::string>().find("seeded from rank 0's own data") != std::string::npos);
  CHECK_FALSE(j.contains("step_wall_us"));  // no whole step ran
  CHECK(j["compute_wall_us"]["median"].get<double>() > 0);
  CHECK(j["final_loss"].is_null());
  size_t collectives = 0, gemms = 0;
  for (const auto& op : j["ops"]) {
    if (op["kind"] == "collective") {
      ++collectives;
      CHECK(op["measured"] == false);
      CHECK(op["seeded_from_local"] == true);
      CHECK(op["time_us"].is_null());
      if (op["op"]["group"] == "tp") CHECK(op["op"]["group_size"] == 2);
    } else {
      CHECK(op["time_us"].is_object());
      CHECK_FALSE(op.contains("seeded_from_local"));
    }
    // tiny-llama: dim 64 (8 heads of 8); wq at tp 2 is colwise, so its local output is 64 / 2 = 32 features.
    if (op["name"] == "layers.0.attention.wq.fwd") {
      ++gemms;
      CHECK(op["op"]["n"] == 32);
    }
  }
  CHECK(collectives > 0);
  CHECK(gemms == 1);
  CHECK(j["ops"].size() == expand(p).ops.size());
}

TEST_CASE("local shapes mode needs a TP group of one process", "[runtime][profile]") {
  CpuBackend be;
  ExecutorOptions o;
  o.local_shapes_of_tp = 2;
  CHECK_THROWS_WITH(Executor(test::lower_example("tiny-llama.yaml", "sequence_parallel", {.tp_degree = 4}), be, o),
                    Catch::Contains("lowered for tp 4"));
}

namespace {

// What a skipped collective of the single-rank mode writes (Executor::seed_skipped_collective), derived here from the
// collective's definition with N ranks holding data like rank 0's: `x` is its input of local shape `xs`.
//   all-gather along d: x in each of the N slots of d;  reduce-scatter (sum) along d: the N slices of x along d
//   summed (rank 0's slice first, then slices 1..N-1 in order, as floats add);  all-reduce (max): x;  all-reduce
//   (sum): that reduce-scatter along the first dim N divides, in each of the N slots of that dim.
std::vector<float> slice_sum(const std::vector<float>& x, const Shape& xs, int d, int parts) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= xs[size_t(i)];
  for (size_t i = size_t(d) + 1; i < xs.size(); ++i) inner *= xs[i];
  const int64_t w = xs[size_t(d)] / parts * inner, row = xs[size_t(d)] * inner;
  std::vector<float> y(size_t(outer * w), 0.0f);
  for (int j = 0; j < parts; ++j)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < w; ++k) {
        float& v = y[size_t(o * w + k)];
        v = j == 0 ? x[size_t(o * row + k)] : v + x[size_t(o * row + j * w + k)];
      }
  return y;
}
std::vector<float> tiled(const std::vector<float>& x, const Shape& xs, int d, int parts) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= xs[size_t(i)];
  for (size_t i = size_t(d) + 1; i < xs.size(); ++i) inner *= xs[i];
  const int64_t w = xs[size_t(d)] * inner;
  std::vector<float> y;
  for (int64_t o = 0; o < outer; ++o)
    for (int i = 0; i < parts; ++i) y.insert(y.end(), x.begin() + o * w, x.begin() + (o + 1) * w);
  return y;
}
int norm_dim(int d, const Shape& s) { return d < 0 ? d + static_cast<int>(s.size()) : d; }

}  // namespace

TEST_CASE("local shapes of tp 2: each skipped collective writes what N ranks like rank 0 would, and the loss is sound",
          "[runtime][profile]") {
  const int variant = GENERATE(0, 1, 2);
  const bool float8 = variant == 1, async = variant == 2;
  CAPTURE(float8, async);
  PlanToggles t{.tp_degree = 2};
  if (float8) t.float8 = Float8Recipe::tensorwise;  // its amax all-reduces (max) over TP
  t.async_tp = async;  // the ring's p2p steps: the local shard copied into the slot each would have received
  const Program p = test::lower_example("tiny-llama.yaml", "sequence_parallel", t);
  CpuBackend be;
  ExecutorOptions o;
  o.local_shapes_of_tp = 2;
  Executor ex(p, be, o);
  CHECK(ex.seeding_persists());  // nothing but a collective writes a collective's output
  std::map<std::string, int> checked;
  ex.set_after_op([&](int i) {
    const FlatOp& op = ex.flat().ops[size_t(i)];
    const auto* c = std::get_if<CollectiveOp>(&op.op->kind);
    if (!c || c->group != Group::tp) return;
    REQUIRE(op.inputs.size() == 1);
    if (c->kind == CollectiveKind::p2p) {  // an async TP ring step: its slot of the gathered tensor is rank 0's shard
      ++checked["p2p"];
      return;
    }
    REQUIRE(op.outputs.size() == 1);
    const std::vector<float> x = ex.read(op.inputs[0]), y = ex.read(op.outputs[0]);
    const Shape& xs = ex.desc(op.inputs[0]).local_shape;
    std::vector<float> want;
    if (c->kind == CollectiveKind::all_gather) {
      want = tiled(x, xs, norm_dim(c->gather_dim, xs), 2);
    } else if (c->kind == CollectiveKind::reduce_scatter) {
      want = slice_sum(x, xs, norm_dim(c->scatter_dim, xs), 2);
    } else if (c->kind == CollectiveKind::all_reduce && c->reduce == ReduceOp::max) {
      want = x;
    } else if (c->kind == CollectiveKind::all_reduce) {
      int d = 0;
      while (d < static_cast<int>(xs.size()) && xs[size_t(d)] % 2 != 0) ++d;
      if (d == static_cast<int>(xs.size())) {
        want = x;
      } else {
        Shape half = xs;
        half[size_t(d)] /= 2;
        want = tiled(slice_sum(x, xs, d, 2), half, d, 2);
      }
    }
    CAPTURE(op.name);
    REQUIRE(want.size() == y.size());
    CHECK(y == want);
    // Seeded from data, not zeros: a gathered or reduced activation holds non-zero values.
    CHECK(std::any_of(y.begin(), y.end(), [](float v) { return v != 0.0f; }));
    ++checked[fmt::format("{} {}", to_string(c->kind), c->reduce == ReduceOp::max ? "max" : "sum")];
  });
  ex.init(7);
  ex.step();
  // sequence parallel tp 2: the norms' outputs gathered, the row-parallel linears' partials reduce-scattered, the
  // sequence-sharded norm weights' gradients all-reduced; float8 tensorwise: the amax of every sharded cast.
  if (async) {
    CHECK(checked["p2p"] > 0);
  } else {
    CHECK(checked["all_gather sum"] > 0);
    CHECK(checked["reduce_scatter sum"] > 0);
  }
  CHECK(checked["all_reduce sum"] > 0);
  if (float8)
    CHECK(checked["all_reduce max"] > 0);
  else
    CHECK(checked["all_reduce max"] == 0);
  // Downstream of the seeded collectives the step is a training step of data like the model's: the loss is finite and
  // near the tp 1 step's on the same seed (both near ln(vocab 256) = 5.55 at initialization).
  CpuBackend be1;
  PlanToggles t1 = t;
  t1.tp_degree = 1;
  Executor ref(test::lower_example("tiny-llama.yaml", "sequence_parallel", t1), be1);
  ref.init(7);
  ref.step();
  CAPTURE(ex.loss(), ref.loss());
  REQUIRE(std::isfinite(ex.loss()));
  CHECK(std::abs(ex.loss() - ref.loss()) < 0.05 * ref.loss());
}

TEST_CASE("local shapes: with seeding off the seeded outputs keep their values, and with it on they are seeded again",
          "[runtime][profile]") {
  const Program p = test::lower_example("tiny-llama.yaml", "sequence_parallel", {.tp_degree = 2});
  CpuBackend be;
  ExecutorOptions o;
  o.local_shapes_of_tp = 2;
  Executor ex(p, be, o);
  int gathered = -1;
  for (const FlatOp& op : ex.flat().ops)
    if (const auto* c = std::get_if<CollectiveOp>(&op.op->kind); c && c->kind == CollectiveKind::all_gather) {
      gathered = op.outputs[0];
      break;
    }
  REQUIRE(gathered >= 0);
  ex.init(3);
  ex.step();
  const std::vector<float> seeded = ex.read(gathered);
  const std::vector<float> marker(seeded.size(), 0.25f);
  ex.write(gathered, marker);
  ex.set_seeding(false);  // what the profiler's compute-only steps do
  ex.step();
  CHECK(ex.read(gathered) == marker);
  ex.set_seeding(true);
  ex.step();
  CHECK(ex.read(gathered) != marker);
  CHECK(std::any_of(seeded.begin(), seeded.end(), [](float v) { return v != 0.0f; }));
}
