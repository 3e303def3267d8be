#pragma once
// Placements of a tensor on the 1-D tensor-parallel mesh, and redistribution between them (DTensor rules).
//
// A placement says what each rank's local tensor means globally:
//   R     replicate: every rank holds the whole tensor.
//   S(d)  shard on dim d (negative d counts from the end): rank r holds the r-th of tp equal slices of dim d.
//   P     partial sum: every rank holds a full-shape addend; the tensor is their sum.
// Canonical printed form: "R", "S(1)", "S(-1)", "P". `parse_placement` accepts exactly what `to_string` prints
// (spaces ignored) plus the long names Replicate(), Shard(d), Partial().
//
// Redistribution src -> dst:
//   P -> R     all-reduce          P -> S(d)  reduce-scatter      S(d) -> R  all-gather
//   R -> S(d)  local slice         S(d) -> S(e) all-to-all        equal      nothing
// Backward of a redistribution src -> dst moves the gradient from the placement it arrives in back to
// `gradient_target(src)`: src itself, except that a P source takes its gradient as R.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plans/util/limits.h"

namespace tptune {

using Shape = std::vector<int64_t>;
std::string to_string(const Shape& s);  // "[1, 8192, 4096]"
// Element count; tptune::Error when it passes limits::max_tensor_elements (2^48) or overflows. (Inline, its error
// out of line: the cost and memory models count the elements of every tensor of every Program the search models.)
[[noreturn]] void throw_too_many_elements(const Shape& s);
inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n) || n > limits::max_tensor_elements) throw_too_many_elements(s);
  return n;
}

struct Placement {
  enum class Kind { replicate, shard, partial };
  Kind kind = Kind::replicate;
  int dim = 0;  // only for shard; may be negative (counts from the end)

  static Placement R() { return {Kind::replicate, 0}; }
  static Placement S(int d) { return {Kind::shard, d}; }
  static Placement P() { return {Kind::partial, 0}; }

  bool is_replicate() const { return kind == Kind::replicate; }
  bool is_shard() const { return kind == Kind::shard; }
  bool is_partial() const { return kind == Kind::partial; }
  // The shard dim as a non-negative index into a tensor of `ndim` dims.
  int normalized_dim(int ndim) const { return dim < 0 ? dim + ndim : dim; }
  // Same placement on a tensor of `ndim` dims (S(-1) == S(2) for 3-D tensors).
  bool same_as(const Placement& o, int ndim) const;
  bool operator==(const Placement& o) const = default;
};

std::string to_string(const Placement& p);
// Throws tptune::Error "<where>: expected a placement R, S(d) or P, got '<text>'".
Placement parse_placement(std::string_view text, const std::string& where);

// Local shape of a tensor of `global` shape under `p` on a mesh of `tp` ranks. Throws tptune::Error naming `what`
// when the sharded dim is not divisible by tp or out of range.
Shape local_shape(const Shape& global, const Placement& p, int tp, const std::string& what);
// Global shape of a local tensor under `p` (what DTensor.from_local infers).
Shape global_shape(const Shape& local, const Placement& p, int tp, const std::string& what);

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, all_to_all, p2p };
std::string_view to_string(CollectiveKind k);

// What a redistribution does. `collective` is empty for a no-op or a local slice.
struct Redistribution {
  std::optional<CollectiveKind> collective;
  bool local_slice = false;  // R -> S(d): each rank keeps its slice, no communication
  int gather_dim = -1;       // all-gather / all-to-all: the dim that is concatenated (normalized)
  int scatter_dim = -1;      // reduce-scatter / all-to-all / slice: the dim that is split (normalized)
};
// Throws tptune::Error naming `what` for an impossible redistribution (R -> P is not something DTensor does for
// activations; it is reported as a layout mismatch).
Redistribution plan_redistribution(const Placement& src, const Placement& dst, int ndim, const std::string& what);

// The placement a gradient must be brought to in the backward of a redistribution whose source was `src`.
Placement gradient_target(const Placement& src);

// Bytes a collective moves as nccl-tests counts them: the size of the full (unsharded) tensor.
int64_t collective_bytes(const Shape& global, int bytes_per_element);

}  // namespace tptune
