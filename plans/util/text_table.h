#pragma once
// A text table whose columns are as wide as their widest cell: the tables of `tp-plan explain`, `simulate` and
// `search`. A cell is never cut and never pushes the cells after it out of their column.
//
//   TextTable t({{"phase", 10}, {"module", 32}, {"bytes", 10, Align::right}, {"group", 0, Align::left, 2}});
//   t.row({"forward", "layers.0.attention.wo", "64.0 MiB", "tp"});
//   std::string text = t.str("  ");  // the header line, then one line per row, each after "  "
//
// A column is max(its minimum width, its header's and its cells' widths) wide. The minimums are the widths the reports
// have always used, so that a table whose cells fit them reads as before. Before each column but the first go `gap`
// spaces. A left-aligned last column is not padded (lines end without spaces). Widths count bytes: the cells are
// ASCII (names, numbers, units).

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tptune {

enum class Align { left, right };

struct TextColumn {
  std::string header;
  size_t min_width = 0;
  Align align = Align::left;
  size_t gap = 1;  // spaces before this column (ignored for the first)
};

class TextTable {
 public:
  explicit TextTable(std::vector<TextColumn> columns);
  // One cell per column; tptune::Error otherwise (a caller's mistake, named).
  void row(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // Every line ends in '\n'; `header` false leaves out the header line.
  std::string str(std::string_view indent = "", bool header = true) const;

 private:
  std::vector<TextColumn> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tptune
