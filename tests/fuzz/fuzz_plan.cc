// libFuzzer target: the plan loader (plans/language/plan.h: load_plan_string, plan_to_yaml).
//
// Property: load_plan_string() returns a Plan or throws a one-line tptune::Error (fuzz_check.h). A Plan
// round-trips: plan_to_yaml() read back gives an equal Plan (same toggles, entries and family), and writing that
// again gives the same text (the canonical form is a fixed point).
//
// Built twice (cmake/fuzz.cmake): fuzz_plan checks the loader alone; fuzz_plan_lower also lowers every valid plan
// on the tiny Llama and tiny GPT models of examples/ (tiny-llama.yaml, tiny-gpt.yaml, inlined below so that the
// target needs no files), where lowering must give a Program or a one-line tptune::Error naming the module.

#include <cstddef>
#include <cstdint>
#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "tests/fuzz/fuzz_check.h"
#ifdef TPTUNE_FUZZ_LOWER
#include "plans/lower/lower.h"
#endif

namespace tptune::fuzz {
namespace {

#ifdef TPTUNE_FUZZ_LOWER
const Config& tiny(int which) {
  static const Config llama = load_config_string(R"(
model: {dim: 64, n_layers: 2, n_heads: 8, n_kv_heads: 4, ffn_dim: 128, vocab_size: 256, mlp: swiglu, norm: rmsnorm}
training: {seq_len: 32, local_batch_size: 2, dtype: fp32, activation_checkpointing: none}
cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 4}
)",
                                                 "tiny-llama.yaml");
  static const Config gpt = load_config_string(R"(
model: {dim: 64, n_layers: 2, n_heads: 4, n_kv_heads: 4, ffn_dim: 128, vocab_size: 256, mlp: gelu, norm: layernorm}
training: {seq_len: 32, local_batch_size: 2, dtype: fp32, activation_checkpointing: none}
cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 4}
)",
                                               "tiny-gpt.yaml");
  return which == 0 ? llama : gpt;
}
#endif

void load_and_check(const std::string& text) {
  const Plan plan = load_plan_string(text, "fuzz-plan.yaml");
  const std::string written = plan_to_yaml(plan);
  Plan again;
  try {
    again = load_plan_string(written, "fuzz-roundtrip.yaml");
  } catch (const Error& e) {
    defect("a loaded plan, written back, is refused", std::string(e.what()) + "\n--- written:\n" + written);
  }
  if (!(again == plan) || again.family != plan.family)
    defect("plan round trip changed the plan", "--- written:\n" + written + "--- rewritten:\n" + plan_to_yaml(again));
  if (plan_to_yaml(again) != written)
    defect("plan_to_yaml is not a fixed point", "--- first:\n" + written + "--- second:\n" + plan_to_yaml(again));

#ifdef TPTUNE_FUZZ_LOWER
  for (int which : {0, 1}) {
    const Config& c = tiny(which);
    expect_clean([&] { (void)lower(c.model, c.training, plan); });
  }
#endif
}

}  // namespace
}  // namespace tptune::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tptune::fuzz::expect_clean([&] { tptune::fuzz::load_and_check(text); });
  return 0;
}
