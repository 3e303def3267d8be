#include "plans/util/text_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/util/error.h"

namespace tptune {

TextTable::TextTable(std::vector<TextColumn> columns) : columns_(std::move(columns)) {}

void TextTable::row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size())
    throw Error(fmt::format("text table: a row of {} cells for {} columns", cells.size(), columns_.size()));
  rows_.push_back(std::move(cells));
}

std::string TextTable::str(std::string_view indent, bool header) const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = std::max(columns_[c].min_width, header ? columns_[c].header.size() : 0);
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  auto line = [&](auto cell) {
    out += indent;
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string_view v = cell(c);
      if (c > 0) out.append(columns_[c].gap, ' ');
      const size_t pad = width[c] - v.size();
      const bool last = c + 1 == columns_.size();
      if (columns_[c].align == Align::right) out.append(pad, ' ');
      out += v;
      if (columns_[c].align == Align::left && !last) out.append(pad, ' ');
    }
    out += '\n';
  };
  if (header) line([&](size_t c) { return std::string_view(columns_[c].header); });
  for (const auto& r : rows_) line([&](size_t c) { return std::string_view(r[c]); });
  return out;
}

}  // namespace tptune
