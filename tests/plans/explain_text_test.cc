// tp-plan explain's text: the collectives tables keep their columns whatever the names (async TP's ring steps and
// float8's casts name tensors of up to 63 characters, past the tensor column's 40), and the parameter counts.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "lowering_helpers.h"

using namespace tptune;
using namespace tptune::testing;

namespace {

// The lines of every collectives table of the text: a header line starting "  phase", then its rows.
std::vector<std::vector<std::string>> tables(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  bool in_table = false;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("  phase ", 0) == 0) {
      out.push_back({l});
      in_table = true;
    } else if (in_table && l.rfind("  ", 0) == 0 && l != "  (none)" && l[2] != '(') {
      out.back().push_back(l);
    } else {
      in_table = false;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("explain: a tensor name longer than its column shifts no other column") {
  const Program p =
      lower_preset("sequence_parallel",
                   {.tp_degree = 8, .float8 = Float8Recipe::tensorwise, .async_tp = true, .loss_parallel = true});
  const std::string text = explain_text(p);
  const auto ts = tables(text);
  REQUIRE(ts.size() >= 2);
  size_t longest = 0;
  for (const auto& t : ts) {
    // Each column's cells start where its heading starts (left-aligned) or end where it ends (bytes, right-aligned).
    const size_t dtype = t[0].find(" dtype ") + 1, shape = t[0].find(" global shape ") + 1,
                 bytes_end = t[0].find(" bytes ") + 6, group = t[0].find(" group") + 1;
    for (size_t i = 1; i < t.size(); ++i) {
      CAPTURE(t[0], t[i]);
      const std::string& row = t[i];
      REQUIRE(row.size() > group);
      CHECK(row[dtype - 1] == ' ');
      CHECK(row[dtype] != ' ');
      CHECK(row[shape - 1] == ' ');
      CHECK(row[shape] == '[');
      CHECK(row[bytes_end - 1] == 'B');  // "4.0 MiB", "4 B"
      CHECK(row[bytes_end] == ' ');
      CHECK(row[group - 1] == ' ');
      CHECK(row[group] != ' ');
      longest = std::max(longest, row.find(' ', t[0].find(" tensor ") + 1) - (t[0].find(" tensor ") + 1));
    }
  }
  CHECK(longest > 40);  // some tensor name is wider than the column's minimum: the case this test is about
}

TEST_CASE("explain: the text says the parameter counts") {
  // Llama 3 8B at tp 8 (tests/plans/parameter_count_test.cc has the arithmetic).
  const std::string text = explain_text(lower_preset("vanilla", {.tp_degree = 8}));
  CHECK(text.find("Parameters: 8,030,261,248 in the model, 1,004,015,616 per GPU (its tp 8 shard)\n") !=
        std::string::npos);
  const std::string fsdp = explain_text(lower_preset("vanilla", {.tp_degree = 8, .dp_shard = 2}));
  CHECK(fsdp.find("502,007,808 per GPU (its tp 8 shard, chunked over dp_shard 2 by FSDP)") != std::string::npos);
}

TEST_CASE("explain: a mixture of experts' token-count all-reduces are no FSDP traffic and no gradient") {
  // tiny_moe_model() at tp 2 x ep 2 with FSDP over dp_shard 2: its optimizer step all-reduces each block's tokens per
  // expert over dp and (EP on, tp > 1) over tp. The text named the dp one "parameters" and took the tp one for the
  // Partial gradients DTensor all-reduces when no FSDP wraps the model.
  PlanToggles t{.tp_degree = 2, .dp_shard = 2, .local_batch_size = 2};
  Plan plan = test::make_plan("sequence_parallel", t);
  plan.ep_degree = 2;
  const std::string text = explain_text(lower(test::tiny_moe_model(), Training{.seq_len = 16}, plan));
  CAPTURE(text);
  CHECK(text.find("no FSDP wraps the model") == std::string::npos);
  CHECK(text.find("all_reduce      layers.0.moe.router.tokens_per_expert ") != std::string::npos);
  CHECK(text.find("optimizer  layers.0.moe                     all_reduce      parameters") == std::string::npos);
  // Without FSDP (dp_shard 1) the norm weights' Partial gradients are all-reduced at the optimizer step: said.
  const std::string no_fsdp = explain_text(lower_preset("sequence_parallel", {.tp_degree = 8}));
  CHECK(no_fsdp.find("(optimizer: no FSDP wraps the model (dp_shard 1)") != std::string::npos);
}
