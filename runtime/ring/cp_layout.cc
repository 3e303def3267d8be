// Context-parallel sequence layouts; see cp_layout.h.
#include "runtime/ring/cp_layout.h"

#include <fmt/format.h>

#include <cstring>

#include "plans/util/error.h"

namespace tptune {

std::string_view seq_layout_name(SeqLayout layout) {
  return layout == SeqLayout::head_tail ? "head_tail" : "contiguous";
}

int64_t cp_local_seq(int64_t seq, int cp, SeqLayout layout) {
  if (cp <= 0 || seq <= 0)
    throw Error(fmt::format("context parallel: cp {} and sequence {} must be positive", cp, seq));
  const int64_t parts = layout == SeqLayout::head_tail ? 2 * int64_t(cp) : int64_t(cp);
  if (seq % parts != 0)
    throw Error(fmt::format("context parallel: sequence length {} is not divisible by {} ({} layout, cp {})", seq,
                            parts, seq_layout_name(layout), cp));
  return seq / cp;
}

std::vector<int64_t> cp_positions(int64_t seq, int cp, int rank, SeqLayout layout) {
  const int64_t local = cp_local_seq(seq, cp, layout);
  if (rank < 0 || rank >= cp) throw Error(fmt::format("context parallel: rank {} outside [0, {})", rank, cp));
  std::vector<int64_t> pos(size_t(local), 0);
  if (layout == SeqLayout::contiguous) {
    for (int64_t i = 0; i < local; ++i) pos[size_t(i)] = rank * local + i;
    return pos;
  }
  const int64_t chunk = local / 2, tail = 2 * int64_t(cp) - 1 - rank;
  for (int64_t i = 0; i < chunk; ++i) {
    pos[size_t(i)] = rank * chunk + i;
    pos[size_t(chunk + i)] = tail * chunk + i;
  }
  return pos;
}

namespace {

void check_size(const std::vector<float>& t, int64_t rows, int64_t batch, int64_t width, const char* what) {
  if (width <= 0 || batch <= 0 || int64_t(t.size()) != batch * rows * width)
    throw Error(fmt::format("context parallel: {} holds {} values, expected batch {} x {} rows x width {}", what,
                            t.size(), batch, rows, width));
}

}  // namespace

std::vector<float> cp_shard(const std::vector<float>& full, int64_t batch, int64_t seq, int64_t width, int cp, int rank,
                            SeqLayout layout) {
  const std::vector<int64_t> pos = cp_positions(seq, cp, rank, layout);
  const int64_t local = int64_t(pos.size());
  check_size(full, seq, batch, width, "the full tensor");
  std::vector<float> out(size_t(batch * local * width));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < local; ++i)
      std::memcpy(&out[size_t((b * local + i) * width)], &full[size_t((b * seq + pos[size_t(i)]) * width)],
                  size_t(width) * sizeof(float));
  return out;
}

void cp_unshard(const std::vector<float>& local_t, int64_t batch, int64_t seq, int64_t width, int cp, int rank,
                SeqLayout layout, std::vector<float>& full) {
  const std::vector<int64_t> pos = cp_positions(seq, cp, rank, layout);
  const int64_t local = int64_t(pos.size());
  check_size(local_t, local, batch, width, "the shard");
  check_size(full, seq, batch, width, "the full tensor");
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < local; ++i)
      std::memcpy(&full[size_t((b * seq + pos[size_t(i)]) * width)], &local_t[size_t((b * local + i) * width)],
                  size_t(width) * sizeof(float));
}

}  // namespace tptune
