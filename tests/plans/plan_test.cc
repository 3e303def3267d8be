// Parallel styles (torch's defaults), FQN patterns, style lookup, plan equality and the two presets.
#include "plans/language/plan.h"

#include <catch2/catch.hpp>

#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;
using P = Placement;

namespace {

// The FQNs of the modules of a model with `layers` blocks (swiglu when `w3`).
std::vector<std::string> module_fqns(int layers, bool w3) {
  std::vector<std::string> f = {"tok_embeddings", "norm", "output"};
  for (int i = 0; i < layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    for (const char* m : {"attention_norm", "attention", "attention.wq", "attention.wk", "attention.wv", "attention.wo",
                          "ffn_norm", "feed_forward", "feed_forward.w1", "feed_forward.w2"})
      f.push_back(l + m);
    if (w3) f.push_back(l + "feed_forward.w3");
  }
  return f;
}

// By value: callers pass temporary plans (preset_plan(...)), and a reference into one would dangle.
ParallelStyle style(const Plan& p, const std::string& fqn) {
  const ParallelStyle* s = p.style_for(fqn);
  INFO(fqn);
  REQUIRE(s != nullptr);
  return *s;
}

Plan base_plan() {
  Plan b = test::toggles_plan({.tp_degree = 4,
                               .dp_shard = 2,
                               .float8 = Float8Recipe::tensorwise,
                               .async_tp = true,
                               .loss_parallel = false,
                               .activation_checkpointing = ActivationCheckpointing::selective,
                               .local_batch_size = 3});
  b.family = "ignored";
  b.modules = {{"x", ParallelStyle::colwise()}};
  return b;
}

}  // namespace

TEST_CASE("styles have torch.distributed.tensor.parallel's defaults", "[plan]") {
  const auto col = ParallelStyle::colwise();
  CHECK(col.kind == StyleKind::colwise);
  CHECK(col.input_layout == P::R());
  CHECK(col.desired_input_layout == P::R());
  CHECK(col.output_layout == P::S(-1));
  CHECK(col.use_local_output);

  const auto row = ParallelStyle::rowwise();
  CHECK(row.kind == StyleKind::rowwise);
  CHECK(row.input_layout == P::S(-1));
  CHECK(row.desired_input_layout == P::S(-1));
  CHECK(row.output_layout == P::R());
  CHECK(row.use_local_output);

  const auto sp = ParallelStyle::sequence_parallel();
  CHECK(sp.kind == StyleKind::sequence_parallel);
  CHECK(sp.input_layout == P::S(1));
  CHECK(sp.desired_input_layout == P::S(1));
  CHECK(sp.output_layout == P::S(1));
  CHECK_FALSE(sp.use_local_output);

  const auto pmi = ParallelStyle::prepare_module_input(P::S(1), P::R());
  CHECK(pmi.kind == StyleKind::prepare_module_input);
  CHECK(pmi.input_layout == P::S(1));
  CHECK(pmi.desired_input_layout == P::R());
  CHECK_FALSE(pmi.use_local_output);

  const auto np = ParallelStyle::no_parallel();
  CHECK(np.kind == StyleKind::no_parallel);
  CHECK(np.input_layout == P::R());
  CHECK(np.desired_input_layout == P::R());
  CHECK(np.output_layout == P::R());
  CHECK(np.use_local_output);
}

TEST_CASE("styles print in one canonical line", "[plan]") {
  CHECK(to_string(StyleKind::prepare_module_input) == "prepare_module_input");
  CHECK(to_string(ParallelStyle::colwise()) == "colwise(input R, output S(-1), local)");
  CHECK(to_string(ParallelStyle::rowwise()) == "rowwise(input S(-1), output R, local)");
  auto emb = ParallelStyle::rowwise();
  emb.input_layout = P::R();
  emb.output_layout = P::S(1);
  CHECK(to_string(emb) == "rowwise(input R, output S(1), local)");
  CHECK(to_string(ParallelStyle::sequence_parallel()) == "sequence_parallel(input S(1), output S(1))");
  CHECK(to_string(ParallelStyle::prepare_module_input(P::S(1), P::R())) == "prepare_module_input(input S(1) -> R)");
  CHECK(to_string(ParallelStyle::no_parallel()) == "no_parallel");
}

TEST_CASE("fqn_matches: `*` is exactly one component", "[plan]") {
  CHECK(fqn_matches("output", "output"));
  CHECK_FALSE(fqn_matches("output", "outputs"));
  CHECK(fqn_matches("layers.*.attention.wq", "layers.0.attention.wq"));
  CHECK(fqn_matches("layers.*.attention.wq", "layers.31.attention.wq"));
  CHECK_FALSE(fqn_matches("layers.*.attention.wq", "layers.0.attention.wk"));
  CHECK_FALSE(fqn_matches("layers.*.attention", "layers.0.attention.wq"));  // not a prefix match
  CHECK_FALSE(fqn_matches("layers.*.wq", "layers.0.attention.wq"));         // `*` does not span two components
  CHECK_FALSE(fqn_matches("layers.*", "layers"));
  CHECK(fqn_matches("*", "norm"));
  CHECK_FALSE(fqn_matches("*", "layers.0"));
  CHECK(fqn_matches("layers.*.*", "layers.1.ffn_norm"));
  CHECK_FALSE(fqn_matches("layers.1", "layers.10"));
}

TEST_CASE("style_for: the last matching entry wins, unmatched modules get nullptr", "[plan]") {
  Plan p;
  p.modules = {{"layers.*.attention.wq", ParallelStyle::colwise()},
               {"layers.1.attention.wq", ParallelStyle::rowwise()},
               {"norm", ParallelStyle::sequence_parallel()}};
  CHECK(p.style_for("layers.0.attention.wq")->kind == StyleKind::colwise);
  CHECK(p.style_for("layers.1.attention.wq")->kind == StyleKind::rowwise);
  CHECK(p.style_for("norm")->kind == StyleKind::sequence_parallel);
  CHECK(p.style_for("output") == nullptr);
  CHECK(p.style_for("layers.0.attention") == nullptr);
  std::swap(p.modules[0], p.modules[1]);  // now the general pattern comes last and wins
  CHECK(p.style_for("layers.1.attention.wq")->kind == StyleKind::colwise);
}

TEST_CASE("plan equality compares toggles and entries, not labels or lines", "[plan]") {
  const Plan a = base_plan();
  Plan b = a;
  b.family = "other";
  b.source = "x.yaml";
  b.modules[0].line = 12;
  CHECK(a == b);
  auto differs = [&](auto change) {
    Plan c = a;
    change(c);
    return !(a == c);
  };
  CHECK(differs([](Plan& c) { c.tp_degree = 8; }));
  CHECK(differs([](Plan& c) { c.dp_shard = 1; }));
  CHECK(differs([](Plan& c) { c.float8 = Float8Recipe::rowwise; }));
  CHECK(differs([](Plan& c) { c.async_tp = false; }));
  CHECK(differs([](Plan& c) { c.loss_parallel = true; }));
  CHECK(differs([](Plan& c) { c.activation_checkpointing = ActivationCheckpointing::full; }));
  CHECK(differs([](Plan& c) { c.local_batch_size = 1; }));
  CHECK(differs([](Plan& c) { c.modules[0].pattern = "y"; }));
  CHECK(differs([](Plan& c) { c.modules[0].style.use_local_output = false; }));
  CHECK(differs([](Plan& c) { c.modules[0].style.output_layout = P::R(); }));
  CHECK(differs([](Plan& c) { c.modules.push_back({"z", ParallelStyle::rowwise()}); }));
}

TEST_CASE("presets copy the toggles of the base plan", "[plan][presets]") {
  const Plan b = base_plan();
  for (const auto& name : plan_preset_names()) {
    const Plan p = preset_plan(name, b);
    CHECK(p.family == name);
    CHECK(p.source == "preset:" + name);
    CHECK(p.tp_degree == 4);
    CHECK(p.dp_shard == 2);
    CHECK(p.float8 == Float8Recipe::tensorwise);
    CHECK(p.async_tp);
    CHECK_FALSE(p.loss_parallel);
    CHECK(p.activation_checkpointing == ActivationCheckpointing::selective);
    CHECK(p.local_batch_size == 3);
    CHECK(p.style_for("x") == nullptr);  // base modules are not carried over
  }
  CHECK(plan_preset_names() == std::vector<std::string>{"vanilla", "sequence_parallel"});
}

TEST_CASE("vanilla: Megatron TP without sequence parallel", "[plan][presets]") {
  const Plan p = preset_plan("vanilla", Plan{});
  const auto& emb = style(p, "tok_embeddings");
  CHECK(emb.kind == StyleKind::rowwise);
  CHECK(emb.input_layout == P::R());
  CHECK(emb.output_layout == P::R());
  const auto& out = style(p, "output");
  CHECK(out == ParallelStyle{StyleKind::colwise, P::R(), P::R(), P::R(), true});
  for (int layer : {0, 1, 31}) {
    const std::string l = "layers." + std::to_string(layer) + ".";
    for (const char* m : {"attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3"})
      CHECK(style(p, l + m) == ParallelStyle::colwise());
    for (const char* m : {"attention.wo", "feed_forward.w2"}) CHECK(style(p, l + m) == ParallelStyle::rowwise());
    for (const char* m : {"attention_norm", "ffn_norm", "attention", "feed_forward"})
      CHECK(p.style_for(l + m) == nullptr);
  }
  CHECK(p.style_for("norm") == nullptr);
}

TEST_CASE("vanilla with loss parallel keeps the logits vocab-sharded", "[plan][presets]") {
  Plan b;
  b.loss_parallel = true;
  const auto& out = style(preset_plan("vanilla", b), "output");
  CHECK(out.output_layout == P::S(-1));
  CHECK_FALSE(out.use_local_output);
}

TEST_CASE("sequence_parallel: torchtitan's apply_tp", "[plan][presets]") {
  Plan b;
  b.loss_parallel = true;
  const Plan p = preset_plan("sequence_parallel", b);
  const auto& emb = style(p, "tok_embeddings");
  CHECK(emb.kind == StyleKind::rowwise);
  CHECK(emb.input_layout == P::R());
  CHECK(emb.output_layout == P::S(1));
  CHECK(style(p, "norm") == ParallelStyle::sequence_parallel());
  const auto& out = style(p, "output");
  CHECK(out.kind == StyleKind::colwise);
  CHECK(out.input_layout == P::S(1));
  CHECK(out.output_layout == P::S(-1));
  CHECK_FALSE(out.use_local_output);
  for (int layer : {0, 7}) {
    const std::string l = "layers." + std::to_string(layer) + ".";
    CHECK(style(p, l + "attention_norm") == ParallelStyle::sequence_parallel());
    CHECK(style(p, l + "ffn_norm") == ParallelStyle::sequence_parallel());
    CHECK(style(p, l + "attention") == ParallelStyle::prepare_module_input(P::S(1), P::R()));
    CHECK(style(p, l + "feed_forward") == ParallelStyle::prepare_module_input(P::S(1), P::R()));
    for (const char* m : {"attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3"})
      CHECK(style(p, l + m) == ParallelStyle::colwise());
    for (const char* m : {"attention.wo", "feed_forward.w2"}) {
      const auto& s = style(p, l + m);
      CHECK(s.kind == StyleKind::rowwise);
      CHECK(s.input_layout == P::S(-1));
      CHECK(s.output_layout == P::S(1));
      CHECK(s.use_local_output);
    }
  }

  b.loss_parallel = false;
  const auto& gathered = style(preset_plan("sequence_parallel", b), "output");
  CHECK(gathered.input_layout == P::S(1));
  CHECK(gathered.output_layout == P::R());
  CHECK(gathered.use_local_output);
}

TEST_CASE("every module of a swiglu or gelu model gets the style its preset means", "[plan][presets]") {
  // Property: in sequence_parallel every module is covered; in vanilla exactly the norms and the attention/MLP
  // containers are not. A gelu model has no w3, and the w3 pattern simply matches nothing.
  for (bool w3 : {true, false}) {
    const auto fqns = module_fqns(3, w3);
    const Plan sp = preset_plan("sequence_parallel", Plan{});
    for (const auto& f : fqns) CHECK(sp.style_for(f) != nullptr);
    const Plan v = preset_plan("vanilla", Plan{});
    int uncovered = 0;
    for (const auto& f : fqns) uncovered += v.style_for(f) == nullptr;
    CHECK(uncovered == 1 + 3 * 4);  // final norm + per layer attention_norm, attention, ffn_norm, feed_forward
  }
}

TEST_CASE("an unknown plan preset lists the known ones", "[plan][presets][errors]") {
  CHECK_THROWS_WITH(preset_plan("megatron", Plan{}),
                    "unknown plan preset 'megatron'; expected one of vanilla, sequence_parallel");
}
