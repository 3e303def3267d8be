// The search's text tables keep their columns whatever the cells hold: a float8 recipe wider than the column's
// usual width (rowwise_with_gw_hp, 18 characters), prune counts of 7 digits.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "plans/util/text_table.h"
#include "sim/report/search_report.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The lines of `text` from the one starting with `first` up to the next empty line (or the end).
std::vector<std::string> block_from(const std::string& text, const std::string& first) {
  std::vector<std::string> out;
  bool in = false;
  for (const std::string& l : lines_of(text)) {
    if (!in && l.rfind(first, 0) == 0) in = true;
    if (in && l.empty()) break;
    if (in) out.push_back(l);
  }
  return out;
}

// Every row's cell in the column of `heading` starts where the heading starts (left-aligned columns) or ends where
// it ends (right-aligned): a space before / after it, text on the other side.
void check_left_aligned(const std::vector<std::string>& table, const std::string& heading) {
  REQUIRE(table.size() > 1);
  const size_t at = table[0].find(" " + heading + " ") + 1;
  REQUIRE(at != std::string::npos + 1);
  for (size_t i = 1; i < table.size(); ++i) {
    CAPTURE(heading, table[0], table[i]);
    REQUIRE(table[i].size() > at);
    CHECK(table[i][at - 1] == ' ');
    CHECK(table[i][at] != ' ');
  }
}
void check_right_aligned(const std::vector<std::string>& table, const std::string& heading) {
  REQUIRE(table.size() > 1);
  const size_t end = table[0].find(heading) + heading.size();  // one past the heading's last character
  for (size_t i = 1; i < table.size(); ++i) {
    CAPTURE(heading, table[0], table[i]);
    REQUIRE(table[i].size() >= end);
    CHECK(table[i][end - 1] != ' ');
    CHECK((table[i].size() == end || table[i][end] == ' '));
  }
}

}  // namespace

TEST_CASE("text table: columns widen to their widest cell and keep the ones after them in place", "[report]") {
  TextTable t({{"name", 4}, {"n", 3, Align::right}, {"note", 0, Align::left, 2}});
  t.row({"a", "1", "x"});
  t.row({"rowwise_with_gw_hp", "1234567", "y"});
  // name: 18 wide (its widest cell); n: 7; note: the last, left-aligned, unpadded.
  CHECK(t.str("  ") ==
        "  name                     n  note\n"
        "  a                        1  x\n"
        "  rowwise_with_gw_hp 1234567  y\n");
  CHECK(t.str("", false) == "a                        1  x\nrowwise_with_gw_hp 1234567  y\n");
  // Cells that fit keep the minimum widths.
  TextTable narrow({{"name", 6}, {"n", 3, Align::right}});
  narrow.row({"ab", "7"});
  CHECK(narrow.str() == "name     n\nab       7\n");
  CHECK_THROWS_WITH(narrow.row({"only one"}), "text table: a row of 1 cells for 2 columns");
}

TEST_CASE("search table: a float8 rowwise_with_gw_hp row and 7-digit prune counts stay in their columns",
          "[report][search]") {
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  cfg.search.tp_degrees = {8};
  cfg.search.presets = {"sequence_parallel"};
  cfg.search.float8 = {Float8Recipe::none, Float8Recipe::rowwise_with_gw_hp};
  cfg.search.async_tp = {false};
  cfg.search.loss_parallel = {true};
  cfg.search.activation_checkpointing = {ActivationCheckpointing::selective};
  cfg.search.local_batch_sizes = {1, 2};
  SearchResult r = search(cfg, {});
  REQUIRE(r.ranking.size() >= 2);
  const std::string before = search_table(cfg, r, 10);
  const std::vector<std::string> top = block_from(before, "   #");
  bool wide = false;
  for (const std::string& l : top) wide |= l.find("rowwise_with_gw_hp") != std::string::npos;
  REQUIRE(wide);
  for (const char* h : {"plan", "float8", "async", "loss", "AC"}) check_left_aligned(top, h);
  for (const char* h : {"#", "tp", "batch", "step ms", "tok/s/GPU", "MFU", "mem GiB", "exp comm"})
    check_right_aligned(top, h);
  const std::vector<std::string> front = block_from(pareto_text(r), "Pareto");
  if (front.size() > 2) {  // the heading line, the table's header, its rows
    const std::vector<std::string> table(front.begin() + 1, front.end());
    for (const char* h : {"plan", "float8", "AC"}) check_left_aligned(table, h);
    for (const char* h : {"tok/s/GPU", "mem GiB"}) check_right_aligned(table, h);
  }

  // Prune counts: a 7-digit count next to small ones; every reason starts in one column.
  r.pruned[PruneReason::memory] = 1234567;
  r.pruned[PruneReason::kv_heads] = 3;
  const std::vector<std::string> pruned = block_from(search_table(cfg, r, 10), "pruned:");
  REQUIRE(pruned.size() >= 3);
  auto reason_at = [](const std::string& l) {  // where the text after the count starts
    return l.find_first_not_of(' ', l.find(' ', l.find_first_of("0123456789")));
  };
  for (size_t i = 1; i < pruned.size(); ++i) {
    CAPTURE(pruned[1], pruned[i]);
    CHECK(reason_at(pruned[i]) == reason_at(pruned[1]));
  }
}
