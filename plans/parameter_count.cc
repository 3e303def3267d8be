#include "plans/parameter_count.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "plans/checked_math.h"

namespace tptune {

ParameterCount parameter_count(const Program& p) {
  constexpr std::string_view what = "parameters per rank";
  const int64_t dp = std::max(1, p.dp);
  int64_t per_rank = 0;
  for (const TensorDesc& t : p.tensors) {
    if (t.role != TensorRole::parameter) continue;
    int64_t elems = 1;
    for (size_t d = 0; d < t.local_shape.size(); ++d) {
      // FSDP2's dim-0 chunk: ceil(rows / dp) rows on rank 0.
      const int64_t extent = d == 0 ? (t.local_shape[0] + dp - 1) / dp : t.local_shape[d];
      elems = checked_mul(elems, extent, what);
    }
    if (t.per_layer) elems = checked_mul(elems, p.model.n_layers, what);
    per_rank = checked_add(per_rank, elems, what);
  }
  return {p.model.total_parameters(), per_rank};
}

std::string shard_text(int tp, int dp_shard, int cp) {
  const std::string shard = tp > 1 ? fmt::format("its tp {} shard", tp) : "all of them";
  if (cp > 1) return fmt::format("{}, chunked over dp_shard {} x cp {} by FSDP", shard, dp_shard, cp);
  return dp_shard > 1 ? fmt::format("{}, chunked over dp_shard {} by FSDP", shard, dp_shard) : shard;
}

std::string with_thousands(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace tptune
