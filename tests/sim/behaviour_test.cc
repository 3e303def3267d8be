// What a user checks first, on the real lowering of Llama 3 plans:
//   sequence parallel moves the same bytes as the all-reduces it replaces, with less activation memory;
//   async TP hides communication (never slower than the same plan without it, on torchtitan's shapes);
//   float8 speeds up GEMM-bound configs on H100 (and is refused on A100: simulate_test.cc);
//   TP across nodes is much slower than inside a node;
//   the defaults land near torchtitan's published throughput (docs/performance.md, Llama 3 on 64 A100s).
#include <catch2/catch.hpp>
#include <optional>

#include "plans/lower/lower.h"
#include "sim/cost/comm_cost.h"
#include "sim/simulate.h"

using namespace tptune;

namespace {

struct Setup {
  const char* model = "llama3-8b";
  const char* preset = "sequence_parallel";
  int tp = 8, dp = 1;
  bool async_tp = false;
  Float8Recipe float8 = Float8Recipe::none;
  ActivationCheckpointing ac = ActivationCheckpointing::none;
  int64_t seq = 8192, batch = 1;
  bool loss_parallel = true;
  std::optional<bool> compile;
};

Program lowered(const Setup& s) {
  Model m;
  REQUIRE(model_preset(s.model, m));
  Training t;
  t.seq_len = s.seq;
  t.compile = s.compile;
  Plan base;
  base.tp_degree = s.tp;
  base.dp_shard = s.dp;
  base.async_tp = s.async_tp;
  base.float8 = s.float8;
  base.activation_checkpointing = s.ac;
  base.local_batch_size = s.batch;
  base.loss_parallel = s.loss_parallel;
  return lower(m, t, preset_plan(s.preset, base));
}

StepReport run(const Setup& s, const char* gpu, int nodes, int gpn) {
  return simulate(lowered(s), make_cluster(gpu_preset(gpu), nodes, gpn), default_cost_params());
}

// Bus bytes (nccl-tests: size x bus factor) of the TP collectives of one segment.
double tp_bus_bytes(const Program& p, SegmentKind segment) {
  double bus = 0;
  for (const Op& op : p.segment(segment)->ops)
    if (auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->group == Group::tp)
      bus += static_cast<double>(c->bytes) * bus_factor(c->kind, p.tp);
  return bus;
}

}  // namespace

TEST_CASE("sequence parallel moves the same bytes as the all-reduces, with less activation memory") {
  Setup sp, va;
  va.preset = "vanilla";
  va.loss_parallel = false;
  sp.loss_parallel = false;
  Program psp = lowered(sp), pva = lowered(va);
  // Forward of a block: vanilla all-reduces (b, s, h) twice (2 x S x 2(n-1)/n); sequence parallel all-gathers and
  // reduce-scatters it twice each (4 x S x (n-1)/n): the same bus bytes.
  CHECK(tp_bus_bytes(psp, SegmentKind::block_fwd) == tp_bus_bytes(pva, SegmentKind::block_fwd));
  // Backward: the same again, plus the all-reduce of the two sequence-sharded norm weights' gradients
  // (2 x 4096 x 2 B x 2 x 7/8 = 28672 B), which at dp_shard 1 (no FSDP) DTensor issues at the optimizer step; the
  // vanilla seed plan re-wraps plain tensors and all-reduces more.
  CHECK(tp_bus_bytes(psp, SegmentKind::block_bwd) == tp_bus_bytes(psp, SegmentKind::block_fwd));
  CHECK(tp_bus_bytes(psp, SegmentKind::block_optimizer) == 28672);
  CHECK(tp_bus_bytes(pva, SegmentKind::block_bwd) > tp_bus_bytes(psp, SegmentKind::block_bwd));
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  StepReport rsp = simulate(psp, c, default_cost_params()), rva = simulate(pva, c, default_cost_params());
  CHECK(rsp.memory.saved_per_block < rva.memory.saved_per_block);
  CHECK(rsp.memory.activations < rva.memory.activations);
  CHECK(rsp.step_time_ms <= rva.step_time_ms);
}

TEST_CASE("async TP hides TP communication and is never slower on torchtitan's shapes") {
  struct Case {
    const char* model;
    int tp, dp, nodes;
    ActivationCheckpointing ac;
    Float8Recipe float8;
  };
  const Case cases[] = {
      {"llama3-8b", 2, 4, 1, ActivationCheckpointing::none, Float8Recipe::none},
      {"llama3-8b", 4, 2, 1, ActivationCheckpointing::selective, Float8Recipe::none},
      {"llama3-8b", 8, 1, 1, ActivationCheckpointing::none, Float8Recipe::none},
      {"llama3-8b", 8, 1, 1, ActivationCheckpointing::full, Float8Recipe::tensorwise},
      {"llama3-70b", 8, 8, 8, ActivationCheckpointing::selective, Float8Recipe::none},
      {"llama3-70b", 8, 8, 8, ActivationCheckpointing::full, Float8Recipe::tensorwise},
      {"llama3-70b", 4, 16, 8, ActivationCheckpointing::full, Float8Recipe::none},
  };
  for (const Case& k : cases) {
    INFO(k.model << " tp " << k.tp << " dp " << k.dp << " ac " << to_string(k.ac) << " float8 " << to_string(k.float8));
    Setup s;
    s.model = k.model;
    s.tp = k.tp;
    s.dp = k.dp;
    s.ac = k.ac;
    s.float8 = k.float8;
    StepReport sync = run(s, "h100-sxm", k.nodes, 8);
    s.async_tp = true;
    StepReport async = run(s, "h100-sxm", k.nodes, 8);
    CHECK(async.step_time_ms <= sync.step_time_ms);
    CHECK(async.exposed_tp_comm_ms < sync.exposed_tp_comm_ms);
  }
}

TEST_CASE("float8 speeds up a GEMM-bound config on H100") {
  // Llama3-70B, tp 8, FSDP over 8 nodes, seq 8192: the block GEMMs dominate.
  Setup s;
  s.model = "llama3-70b";
  s.dp = 8;
  s.ac = ActivationCheckpointing::selective;
  StepReport bf16 = run(s, "h100-sxm", 8, 8);
  s.float8 = Float8Recipe::tensorwise;
  StepReport fp8 = run(s, "h100-sxm", 8, 8);
  CHECK(fp8.step_time_ms < 0.9 * bf16.step_time_ms);
  // Rowwise keeps bf16 TP collectives, casts every operand for both GEMM axes, copies the grad_weight operands into
  // the layout torch._scaled_mm takes and runs a slower rowwise-scaled GEMM (CostParams::gemm_fp8_rowwise_factor,
  // fitted to the public record's rowwise runs): the record measured it no faster than bf16 on 70B at tp 8 (599.6
  // against 597.3 tokens/s, profiles/published/torchtitan-asynctp-h100-202506.yaml) and slower on 8B (3708.5 against
  // 4378.0), so it must not pay here, where the 700 W part's faster GEMMs leave the casts and copies a larger share;
  // tensorwise (scales once per tensor, float8 gathers) must beat it.
  s.float8 = Float8Recipe::rowwise;
  StepReport row_tp8 = run(s, "h100-sxm", 8, 8);
  CHECK(row_tp8.step_time_ms > 0.99 * bf16.step_time_ms);
  CHECK(fp8.step_time_ms < row_tp8.step_time_ms);
  s.tp = 4;
  s.float8 = Float8Recipe::none;
  StepReport bf16_tp4 = run(s, "h100-sxm", 8, 8);
  s.float8 = Float8Recipe::rowwise;
  StepReport row = run(s, "h100-sxm", 8, 8);
  CHECK(row.step_time_ms > 0.99 * bf16_tp4.step_time_ms);
  s.float8 = Float8Recipe::tensorwise;
  StepReport tensorwise_tp4 = run(s, "h100-sxm", 8, 8);
  CHECK(tensorwise_tp4.step_time_ms < row.step_time_ms);
}

TEST_CASE("a training step with TP across nodes is much slower than inside a node") {
  // The same plan (Llama3-8B, tp 8, no data parallelism): one node of 8 GPUs, or four nodes of 2, where every TP
  // collective crosses the NICs.
  Setup s;
  StepReport in_node = run(s, "h100-sxm", 1, 8);
  StepReport across = run(s, "h100-sxm", 4, 2);
  CHECK(across.exposed_tp_comm_ms > 3 * in_node.exposed_tp_comm_ms);
  CHECK(across.step_time_ms > 1.5 * in_node.step_time_ms);
}

TEST_CASE("defaults land near torchtitan's published A100 throughput") {
  // pytorch/torchtitan docs/performance.md, Llama 3 with FSDP on 64 A100 80GB, local batch 1, seq 8192:
  //   8B, selective op AC: 2973 tokens/s per GPU (58.2% MFU); 70B, full AC: 331 tokens/s per GPU (51.7% MFU).
  // The simulator should be within 20% (calibration, `tp-plan calibrate`, fits the rest).
  Setup s8;
  s8.tp = 1;
  s8.dp = 64;
  s8.ac = ActivationCheckpointing::selective;
  StepReport r8 = run(s8, "a100-sxm-80gb", 8, 8);
  CHECK(r8.tokens_per_second_per_gpu == Approx(2973).epsilon(0.20));
  Setup s70 = s8;
  s70.model = "llama3-70b";
  s70.ac = ActivationCheckpointing::full;
  StepReport r70 = run(s70, "a100-sxm-80gb", 8, 8);
  CHECK(r70.tokens_per_second_per_gpu == Approx(331).epsilon(0.20));
  CHECK(r70.memory.fits);
}

TEST_CASE("compiled blocks fuse norms, rope and activations: sequence parallel's edge over plain TP shrinks") {
  // Llama3-8B, tp 8 on one node of 8 H100s. Eager, a replicated RMSNorm costs ~6x its fused bytes (CostParams), so
  // running the norms on 1/tp of the tokens (SP) is worth a lot; compiled, every norm is one fused kernel and SP's
  // saving is small. Measured: SP / vanilla 1.26x eager, 1.06x compiled.
  Setup sp, van;
  van.preset = "vanilla";
  StepReport sp_eager = run(sp, "h100-sxm", 1, 8), van_eager = run(van, "h100-sxm", 1, 8);
  sp.compile = van.compile = true;
  StepReport sp_c = run(sp, "h100-sxm", 1, 8), van_c = run(van, "h100-sxm", 1, 8);
  CHECK(sp_c.step_time_ms < sp_eager.step_time_ms);
  CHECK(van_c.step_time_ms < van_eager.step_time_ms);
  const double eager_edge = van_eager.step_time_ms / sp_eager.step_time_ms;
  const double compiled_edge = van_c.step_time_ms / sp_c.step_time_ms;
  CHECK(eager_edge > 1.15);
  CHECK(compiled_edge < 1.10);
  CHECK(compiled_edge < eager_edge);
}

TEST_CASE("float8's speedup is measured against the same compile setting as the published runs") {
  // torchtitan's H100 8B rows: eager bf16 5,762 tok/s, compiled float8 tensorwise 8,532 (1.48x). The float8 run's
  // casts and amax reductions fuse under compile; eager they are extra passes over every activation.
  Setup bf16;
  bf16.tp = 1;
  bf16.dp = 8;
  bf16.batch = 2;
  bf16.ac = ActivationCheckpointing::selective;
  Setup f8 = bf16;
  f8.float8 = Float8Recipe::tensorwise;
  StepReport eager_bf16 = run(bf16, "h100-sxm", 1, 8), eager_f8 = run(f8, "h100-sxm", 1, 8);
  f8.compile = true;
  StepReport compiled_f8 = run(f8, "h100-sxm", 1, 8);
  const double eager_speedup = eager_f8.tokens_per_second_per_gpu / eager_bf16.tokens_per_second_per_gpu;
  const double published_setting = compiled_f8.tokens_per_second_per_gpu / eager_bf16.tokens_per_second_per_gpu;
  CHECK(published_setting > eager_speedup + 0.15);
  CHECK(published_setting == Approx(1.48).epsilon(0.15));
}
