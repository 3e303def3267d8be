// simulate's text (sim/report/step_report.h): the top-ops table tells the rows of one op apart by phase and keeps
// whole names; the working-set line says which phase holds the peak; the parameter counts, text and JSON.
#include <catch2/catch.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/report/step_report.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// Every op of the step ranked (not only the top 12), for llama3-8b sequence_parallel at tp 8 x dp_shard `dp`.
StepReport report_8b(int dp) {
  const Program p = test::lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = dp, .loss_parallel = true});
  const ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 2, 8);
  const CostParams cp = default_cost_params();
  const OpCosts costs = cost_ops(p, c, cp);
  const Timeline tl = schedule(p, costs, cp);
  return make_report(p, c, cp, costs, tl, 100000);
}

// The top-ops table: its header line, then its rows.
std::vector<std::string> top_op_rows(const std::string& text) {
  std::vector<std::string> rows;
  std::istringstream in(text);
  bool in_table = false;
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("  top ops by time", 0) == 0) {
      rows.push_back(l);
      in_table = true;
    } else if (in_table && l.rfind("    ", 0) == 0) {
      rows.push_back(l);
    } else {
      in_table = false;
    }
  }
  return rows;
}

std::string word_at(const std::string& line, size_t at) {
  return at < line.size() ? line.substr(at, line.find(' ', at) - at) : std::string();
}

}  // namespace

TEST_CASE("simulate text: an op in both passes has a row per phase, and names are whole", "[report]") {
  // dp_shard 2: FSDP all-gathers each block's parameters in forward and again in backward, under one op name; the
  // embedding's and the output's FSDP units each have an all-gather (forward) and a reduce-scatter (backward) of the
  // same name, in different segments.
  const StepReport r = report_8b(2);
  const std::vector<std::string> rows = top_op_rows(report_text(r));
  REQUIRE(rows.size() == r.top_ops.size() + 1);
  const size_t phase_at = rows[0].find(" phase ") + 1;
  REQUIRE(phase_at > 0);
  std::set<std::pair<std::string, std::string>> seen;
  std::set<std::string> all_gather_phases;
  for (size_t i = 1; i < rows.size(); ++i) {
    CAPTURE(rows[i]);
    std::string name = rows[i].substr(4, phase_at - 4);
    name.erase(name.find_last_not_of(' ') + 1);
    const std::string phase = word_at(rows[i], phase_at);
    CHECK(name == r.top_ops[i - 1].name);  // whole, however long
    CHECK(phase == r.top_ops[i - 1].phase);
    CHECK(seen.insert({name, phase}).second);  // no two rows read the same
    if (name == "layers.*.fsdp.all_gather") all_gather_phases.insert(phase);
  }
  CHECK(all_gather_phases == std::set<std::string>{"backward", "forward"});
}

TEST_CASE("simulate text: the working set names the phase of the peak", "[report]") {
  StepReport r = report_8b(1);
  for (const auto& [phase, words] :
       std::vector<std::pair<std::string, std::string>>{{"forward", "a block's forward"},
                                                        {"backward", "a block's backward"},
                                                        {"head", "the output layer and loss"}}) {
    r.memory.peak_phase = phase;
    const std::string text = report_text(r);
    CAPTURE(phase);
    CHECK(text.find("    working set  ") != std::string::npos);
    CHECK(text.find("(temporaries at the peak, during " + words + "; logits ") != std::string::npos);
    CHECK(text.find("working set (") == std::string::npos);  // the old "working set (    head)"
  }
}

TEST_CASE("simulate: parameter counts in the text and the JSON", "[report]") {
  // Llama 3 8B at tp 8 x dp_shard 2 (tests/plans/parameter_count_test.cc has the arithmetic).
  const StepReport r = report_8b(2);
  CHECK(r.parameters.total == 8030261248);
  CHECK(r.parameters.per_rank == 502007808);
  CHECK(report_text(r).find("  parameters         8,030,261,248 (per GPU 502,007,808: its tp 8 shard, chunked over "
                            "dp_shard 2 by FSDP)\n") != std::string::npos);
  const nlohmann::json j = report_json(r);
  CHECK(j["parameters"]["total"] == 8030261248);
  CHECK(j["parameters"]["per_gpu"] == 502007808);
}
