#include "plans/language/context_parallel.h"

#include <fmt/format.h>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

// CpRotate's enumerators, in declaration order (torchtitan's context_parallel_rotate_method values).
constexpr std::string_view kCpRotateNames[] = {"allgather", "alltoall"};
static_assert(std::size(kCpRotateNames) == enum_count(CpRotate::alltoall));

std::string_view to_string(CpRotate r) { return name_of(kCpRotateNames, r); }
CpRotate parse_cp_rotate(std::string_view s, const std::string& where) {
  return parse_name<CpRotate>(kCpRotateNames, s, where);
}

void check_cp_seq_len(int64_t seq_len, int cp_degree, bool load_balance, const std::string& where) {
  if (cp_degree <= 1) return;
  const int64_t chunks = load_balance ? 2 * int64_t{cp_degree} : cp_degree;
  if (seq_len % chunks == 0) return;
  if (load_balance)
    throw Error(
        fmt::format("{}: seq_len {} is not divisible by 2 x cp_degree = {}: the head-tail load balancer cuts "
                    "the sequence into 2 x cp chunks",
                    where, seq_len, chunks));
  throw Error(fmt::format("{}: seq_len {} is not divisible by cp_degree {}: each cp rank holds seq_len / cp tokens",
                          where, seq_len, chunks));
}

CpRingStep cp_ring_step(int step, int64_t local, bool load_balance) {
  if (step == 0) return {local, local, true};          // the diagonal block, causal
  if (load_balance) return {local, local / 2, false};  // half a block (head k/v, or tail q: the same FLOPs)
  return {local, local, false};                        // rank cp-1: every earlier rank's block, whole
}

}  // namespace tptune
