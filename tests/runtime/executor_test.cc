// The executor at tp 1 (no MPI): one step of the tiny models computes a sensible loss and the gradient of that loss
// (finite differences), is deterministic in the seed, and the optimizer updates parameters only when asked.
#include "runtime/executor.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {
const Executor::Param& param(const std::vector<Executor::Param>& ps, const std::string& name) {
  for (const auto& p : ps)
    if (p.name == name) return p;
  FAIL("no parameter " << name);
  return ps.front();
}
}  // namespace

TEST_CASE("tp 1 step: loss near log(vocab) and deterministic in the seed", "[runtime][executor]") {
  CpuBackend be;
  Executor ex(test::lower_example("tiny-llama.yaml", "vanilla"), be, {false, {}});
  ex.init(1);
  ex.step();
  const float l1 = ex.loss();
  // Weights are scaled so that logits are O(1): the loss of an untrained model is close to log(256) = 5.545.
  CHECK(std::isfinite(l1));
  CHECK(l1 > std::log(256.0f) - 1.0f);
  CHECK(l1 < std::log(256.0f) + 2.0f);
  ex.step();  // no optimizer: the same step again gives the same loss, bit for bit
  CHECK(ex.loss() == l1);
  ex.init(2);
  ex.step();
  CHECK(ex.loss() != l1);
  ex.init(1);
  ex.step();
  CHECK(ex.loss() == l1);
}

TEST_CASE("every parameter gets a gradient", "[runtime][executor]") {
  for (const char* cfg : {"tiny-llama.yaml", "tiny-gpt.yaml"}) {
    CpuBackend be;
    Executor ex(test::lower_example(cfg, "vanilla"), be, {false, {}});
    ex.init(3);
    ex.step();
    auto ps = ex.parameters();
    // tiny-llama: embedding + 2 x (2 norms + 4 attention + 3 mlp) + norm + output = 21;
    // tiny-gpt: embedding + 2 x (2 layernorms x (w, b) + 4 attention + 2 mlp) + norm (w, b) + output
    //           = 1 + 2 x 10 + 2 + 1 = 24.
    CHECK(ps.size() == (std::string(cfg) == "tiny-llama.yaml" ? 21u : 24u));
    for (const auto& p : ps) {
      INFO(cfg << " " << p.name);
      REQUIRE(p.grad >= 0);
      auto g = ex.read(p.grad);
      double norm = 0;
      for (float x : g) norm += double(x) * x;
      CHECK(std::isfinite(norm));
      CHECK(norm > 0);
    }
  }
}

TEST_CASE("gradients match central finite differences of the loss", "[runtime][executor]") {
  for (const char* cfg : {"tiny-llama.yaml", "tiny-gpt.yaml"}) {
    CpuBackend be;
    Executor ex(test::lower_example(cfg, "vanilla"), be, {false, {}});
    ex.init(5);
    ex.step();
    auto ps = ex.parameters();
    for (const char* name : {"tok_embeddings.weight", "layers.0.attention.wq.weight", "layers.0.attention.wk.weight",
                             "layers.1.attention.wo.weight", "layers.1.feed_forward.w2.weight",
                             "layers.0.attention_norm.weight", "norm.weight", "output.weight"}) {
      const auto& p = param(ps, name);
      auto grad = ex.read(p.grad);
      auto value = ex.read(p.value);
      // The element with the largest gradient, so that the difference quotient is well above float round-off.
      size_t i = size_t(
          std::max_element(grad.begin(), grad.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }) -
          grad.begin());
      const float h = 1e-2f;
      auto loss_at = [&](float v) {
        auto w = value;
        w[i] = v;
        ex.write(p.value, w);
        ex.step();
        return double(ex.loss());
      };
      double fd = (loss_at(value[i] + h) - loss_at(value[i] - h)) / (2.0 * h);
      ex.write(p.value, value);
      // Central differences: truncation O(h^2 f''') plus float round-off of the loss (~5.5 * 6e-8 / 2h ~ 2e-5).
      INFO(cfg << " " << name << "[" << i << "] grad " << grad[i] << " fd " << fd);
      CHECK(std::abs(fd - grad[i]) <= 5e-5 + 0.03 * std::abs(grad[i]));
    }
  }
}

TEST_CASE("repeat_kv computes what grouped attention computes: the same loss and gradients", "[runtime][executor]") {
  // tiny-llama groups 8 query heads over 4 kv heads. Copying each kv head to its 2 query heads before attention
  // (model.gqa repeat_kv) and summing the copies' gradients back is the same function as attending over the groups:
  // every parameter's gradient agrees to fp32 rounding (a wrong head order or a dropped copy would not).
  Config cfg = test::example_config("tiny-llama.yaml");
  Plan plan = test::make_plan("vanilla", {.local_batch_size = cfg.training.local_batch_size});
  const Program grouped = lower(cfg.model, cfg.training, plan);
  cfg.model.gqa = Gqa::repeat_kv;
  const Program repeated = lower(cfg.model, cfg.training, plan);
  CpuBackend be_g, be_r;
  Executor g(grouped, be_g, {false, {}}), r(repeated, be_r, {false, {}});
  g.init(7);
  r.init(7);
  g.step();
  r.step();
  CHECK(std::abs(g.loss() - r.loss()) <= 1e-6f * std::abs(g.loss()));
  const auto pg = g.parameters(), pr = r.parameters();
  REQUIRE(pg.size() == pr.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    INFO(pg[i].name);
    REQUIRE(pg[i].name == pr[i].name);
    const auto a = g.read(pg[i].grad), b = r.read(pr[i].grad);
    REQUIRE(a.size() == b.size());
    double diff = 0, norm = 0;
    for (size_t j = 0; j < a.size(); ++j)
      diff = std::max(diff, double(std::abs(a[j] - b[j]))), norm += double(a[j]) * a[j];
    CHECK(norm > 0);
    CHECK(diff <= 1e-5 * std::sqrt(norm / double(a.size())) + 1e-9);
  }
}

TEST_CASE("the optimizer runs only when asked", "[runtime][executor]") {
  CpuBackend be;
  Program prog = test::lower_example("tiny-llama.yaml", "vanilla");
  Executor skip(prog, be, {false, {}});
  Executor run(prog, be, {true, {}});
  skip.init(7);
  run.init(7);
  skip.step();
  run.step();
  CHECK(skip.loss() == run.loss());  // the update comes after the loss
  auto w_skip = skip.read(param(skip.parameters(), "output.weight").value);
  auto w_run = run.read(param(run.parameters(), "output.weight").value);
  CHECK(w_skip != w_run);
  run.step();
  CHECK(run.loss() < skip.loss());  // one AdamW step on the same batch lowers its loss
}

TEST_CASE("the executor refuses an HSDP Program: the runtime runs one data-parallel replica", "[runtime][executor]") {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  Plan base;
  base.tp_degree = 1;
  base.dp_shard = 2;
  base.dp_replicate = 2;
  base.local_batch_size = cfg.training.local_batch_size;
  CpuBackend be;
  try {
    Executor ex(lower(cfg.model, cfg.training, preset_plan("vanilla", base)), be, {false, {}});
    FAIL("expected the executor to refuse dp_replicate 2");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("dp_replicate 2 (HSDP)") != std::string::npos);
  }
}

TEST_CASE("executor_buffer_bytes: what the step allocates, before allocating it", "[runtime][executor][memory]") {
  const auto fp32 = [](DType) { return Storage::f32; };  // the CPU backend's storage_for
  // tiny-llama at tp 1 (dim 64, 2 layers, 8 heads of 8, 4 kv heads, ffn 128, vocab 256) has
  //   tok_embeddings 256 x 64 = 16384, output 256 x 64 = 16384, norm 64,
  //   per layer: wq 64 x 64 = 4096, wk = wv = (4 x 8) x 64 = 2048 each, wo 4096, w1 = w2 = w3 = 128 x 64 = 8192 each,
  //              two norms of 64 -> 36992; x 2 layers = 73984
  //   = 106816 parameters. Each has its value, its gradient and two AdamW moments in fp32: 16 x 106816 = 1709056
  //   bytes, and the activations come on top.
  const int64_t tiny = executor_buffer_bytes(test::lower_example("tiny-llama.yaml", "vanilla"), fp32);
  CHECK(tiny > 1709056);
  CHECK(tiny < 64 * 1709056);  // the activations of 2 x 32 tokens are not 60 times the parameters

  // Each block adds the same bytes (every layer is instantiated): linear in n_layers.
  auto with_layers = [&](int layers) {
    Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
    cfg.model.n_layers = layers;
    Plan base;
    base.tp_degree = 1;
    base.local_batch_size = cfg.training.local_batch_size;
    return executor_buffer_bytes(lower(cfg.model, cfg.training, preset_plan("vanilla", base)), fp32);
  };
  const int64_t b1 = with_layers(1), b2 = with_layers(2), b3 = with_layers(3);
  CHECK(b2 == tiny);
  CHECK(b2 - b1 > 16 * 36992);  // one block: at least its parameters' four fp32 copies
  CHECK(b3 - b2 == b2 - b1);

  // bf16 storage (the CUDA backend) halves the floating-point buffers and adds an fp32 master per parameter.
  const auto bf16 = [](DType t) { return t == DType::fp32 ? Storage::f32 : Storage::bf16; };
  Config llama = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/llama3-8b-h100.yaml");
  Plan base;
  base.tp_degree = 1;
  base.local_batch_size = llama.training.local_batch_size;
  const Program p8b = lower(llama.model, llama.training, preset_plan("vanilla", base));
  // Llama 3 8B has 8030261248 parameters: in fp32 with gradients and two moments, 16 x 8030261248 = 128484179968
  // bytes (119.7 GiB) before any activation, which is why `tp-run verify` refuses it without --shrink.
  CHECK(executor_buffer_bytes(p8b, fp32) > 128484179968);
  CHECK(executor_buffer_bytes(p8b, bf16) < executor_buffer_bytes(p8b, fp32));
}

namespace {
// Loss and every parameter gradient of one step of `p` (seed 7), with the optimizer as asked.
struct StepResult {
  float loss = 0;
  std::vector<std::vector<float>> grads, values;
};
StepResult run_step(const Program& p, bool optimizer, bool timed = false) {
  CpuBackend be;
  Executor ex(p, be, {optimizer, {}});
  ex.init(7);
  if (timed)
    ex.step([](int, double) {});
  else
    ex.step();
  StepResult r;
  r.loss = ex.loss();
  for (const auto& prm : ex.parameters()) {
    r.grads.push_back(ex.read(prm.grad));
    r.values.push_back(ex.read(prm.value));
  }
  return r;
}
int count_fn(const Program& p, ElementwiseOp::Fn fn) {
  int n = 0;
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == fn) n += 1;
  return n;
}
}  // namespace

TEST_CASE("compiled Programs run the fused kernels: the same loss and gradients as the eager step, bit for bit",
          "[runtime][executor][compile]") {
  // The CPU's fused kernels (add_rmsnorm, rmsnorm_bwd_add, rope_qk, an amax folded into its producer) compute what
  // the eager ops they replace compute, in the same fp32 operations: the step is identical, not merely close. float8
  // tensorwise brings the folded amax (the norms' and SwiGLU's outputs are cast for their GEMMs).
  for (const auto float8 : {Float8Recipe::none, Float8Recipe::tensorwise}) {
    INFO(to_string(float8));
    Config cfg = test::example_config("tiny-llama.yaml");
    const Plan plan = test::make_plan("vanilla", {.float8 = float8, .local_batch_size = cfg.training.local_batch_size});
    cfg.training.compile = false;
    const Program eager = lower(cfg.model, cfg.training, plan);
    cfg.training.compile = true;
    const Program compiled = lower(cfg.model, cfg.training, plan);
    // tiny-llama's 2 blocks: per block 1 add_rmsnorm (the ffn_norm and the attention residual), 2 rmsnorm_bwd_add,
    // 1 rope_qk, 1 rope_qk_bwd, in templates of one block: block.fwd and block.bwd hold one block each.
    CHECK(count_fn(compiled, ElementwiseOp::Fn::add_rmsnorm) == 1);
    CHECK(count_fn(compiled, ElementwiseOp::Fn::rmsnorm_bwd_add) == 2);
    CHECK(count_fn(compiled, ElementwiseOp::Fn::rope_qk) == 1);
    CHECK(count_fn(compiled, ElementwiseOp::Fn::rope_qk_bwd) == 1);
    CHECK(count_fn(eager, ElementwiseOp::Fn::add_rmsnorm) == 0);
    int folded = 0, amax_left = 0;  // amax ops whose producer is elementwise: folded into it, none left
    for (const Segment& s : compiled.segments)
      for (const Op& op : s.ops) {
        if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->amax_of >= 0) folded += 1;
        if (const auto* c = std::get_if<CastFp8Op>(&op.kind))
          amax_left += c->stage == CastFp8Op::Stage::amax && c->producer_elementwise;
      }
    CHECK(amax_left == 0);
    CHECK((folded > 0) == (float8 == Float8Recipe::tensorwise));
    const StepResult a = run_step(eager, false), b = run_step(compiled, false);
    CHECK(a.loss == b.loss);
    REQUIRE(a.grads.size() == b.grads.size());
    for (size_t i = 0; i < a.grads.size(); ++i) CHECK(a.grads[i] == b.grads[i]);
  }
}

TEST_CASE("AdamW runs once per dtype group in a step, with the numerics of one update per parameter",
          "[runtime][executor][adamw]") {
  // step() hands a run of adamw ops to Backend::adamw_multi (one multi-tensor launch per gradient dtype on CUDA); a
  // step that times every op runs them one by one. The updated parameters are the same, bit for bit.
  const Program p = test::lower_example("tiny-llama.yaml", "vanilla");
  const StepResult batched = run_step(p, true), one_by_one = run_step(p, true, true);
  CHECK(batched.loss == one_by_one.loss);
  REQUIRE(batched.values.size() == one_by_one.values.size());
  for (size_t i = 0; i < batched.values.size(); ++i) CHECK(batched.values[i] == one_by_one.values[i]);
  const StepResult no_update = run_step(p, false);
  CHECK(no_update.values != batched.values);  // the update ran
}

TEST_CASE("a MoE router chooses by its scores plus expert_bias, and the update balances the bias",
          "[runtime][executor]") {
  // tiny-moe at tp 1: 8 experts, top 2, T = 2 x 32 = 64 tokens per router. The pre-hook's update after the step,
  // derived by hand for the histogram the step returns: delta_x = 1e-3 x sign(mean - c_x) with mean = 64 x 2 / 8 = 16,
  // then bias_x += delta_x - mean(delta).
  CpuBackend be;
  Executor ex(test::lower_example("tiny-moe.yaml", "vanilla"), be, {false, {}});
  ex.init(3);
  int route = -1, update = -1;
  for (size_t i = 0; i < ex.flat().ops.size(); ++i) {
    const FlatOp& f = ex.flat().ops[i];
    const auto* e = std::get_if<ElementwiseOp>(&f.op->kind);
    if (!e || f.layer != 1) continue;
    if (e->fn == ElementwiseOp::Fn::moe_router && f.op->phase == Phase::forward) route = int(i);
    if (e->fn == ElementwiseOp::Fn::moe_bias_update) update = int(i);
  }
  REQUIRE((route >= 0 && update >= 0));
  const FlatOp& r = ex.flat().ops[size_t(route)];
  const int bias = r.inputs.at(1), counts = r.outputs.at(2), ids = r.outputs.at(1);
  CHECK(ex.flat().ops[size_t(update)].outputs.at(0) == bias);
  CHECK(ex.flat().tensors[size_t(bias)].fqn == "layers.1.moe.router.expert_bias");
  const std::vector<float> seeded = ex.read(bias);
  CHECK(std::any_of(seeded.begin(), seeded.end(), [](float b) { return b != 0.0f; }));  // seeded, not zero

  // A bias of +10 on experts 3 and 6 (scores are probabilities in [0, 1]) sends every token to them.
  std::vector<float> forced(8, 0.0f);
  forced[3] = forced[6] = 10.0f;
  ex.write(bias, forced);
  ex.step();
  const std::vector<float> c = ex.read(counts), chosen = ex.read(ids);
  CHECK(c == std::vector<float>{0, 0, 0, 64, 0, 0, 64, 0});
  CHECK(std::all_of(chosen.begin(), chosen.end(), [](float x) { return x == 3.0f || x == 6.0f; }));
  // The update: c = 64 on experts 3 and 6 (sign -1), 0 elsewhere (sign +1); mean(delta) = 1e-3 x (6 - 2) / 8 = 5e-4;
  // bias 3, 6: 10 - 1e-3 - 5e-4 = 9.9985; the others: 1e-3 - 5e-4 = 5e-4.
  const std::vector<float> updated = ex.read(bias);
  for (int x = 0; x < 8; ++x) {
    INFO("expert " << x);
    CHECK(updated[size_t(x)] == Approx(x == 3 || x == 6 ? 9.9985 : 5e-4).epsilon(1e-6).margin(1e-9));
  }

  // Without the update (update_expert_bias false) the buffer stays.
  ExecutorOptions off;
  off.run_optimizer = false;
  off.update_expert_bias = false;
  Executor still(test::lower_example("tiny-moe.yaml", "vanilla"), be, off);
  still.init(3);
  still.step();
  CHECK(still.read(bias) == seeded);
}
