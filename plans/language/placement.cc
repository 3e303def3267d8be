#include "plans/language/placement.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"
#include "plans/util/yaml_util.h"

namespace tptune {

std::string to_string(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

void throw_too_many_elements(const Shape& s) {
  throw Error(fmt::format("a tensor of shape {} has more than 2^48 elements: the sizes are too large for tptune",
                          to_string(s)));
}

bool Placement::same_as(const Placement& o, int ndim) const {
  if (kind != o.kind) return false;
  return !is_shard() || normalized_dim(ndim) == o.normalized_dim(ndim);
}

std::string to_string(const Placement& p) {
  switch (p.kind) {
    case Placement::Kind::replicate:
      return "R";
    case Placement::Kind::partial:
      return "P";
    case Placement::Kind::shard:
      return fmt::format("S({})", p.dim);
  }
  return "?";
}

Placement parse_placement(std::string_view text, const std::string& where) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  auto fail = [&]() -> Placement {
    throw Error(fmt::format("{}: expected a placement R, S(d) or P, got '{}'", where, yaml::shown(text)));
  };
  if (t == "R" || t == "Replicate()" || t == "Replicate") return Placement::R();
  if (t == "P" || t == "Partial()" || t == "Partial") return Placement::P();
  std::string_view body;
  if (t.starts_with("S(") && t.ends_with(")"))
    body = std::string_view(t).substr(2, t.size() - 3);
  else if (t.starts_with("Shard(") && t.ends_with(")"))
    body = std::string_view(t).substr(6, t.size() - 7);
  else
    return fail();
  if (body.empty()) return fail();
  size_t i = body[0] == '-' ? 1 : 0;
  if (i == body.size()) return fail();
  for (size_t j = i; j < body.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(body[j]))) return fail();
  // A tensor dim: tptune's tensors have at most a few dims, so anything past +-64 is a typo, not a dim.
  int d = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), d);
  if (ec != std::errc() || end != body.data() + body.size() || d < -64 || d > 63)
    throw Error(fmt::format("{}: {}: expected a shard dim in -64..63 (a tensor dim, negative counts from the end)",
                            where, yaml::shown(text)));
  return Placement::S(d);
}

static int checked_dim(const Placement& p, const Shape& s, const std::string& what) {
  int d = p.normalized_dim(static_cast<int>(s.size()));
  if (d < 0 || d >= static_cast<int>(s.size()))
    throw Error(fmt::format("{}: placement {} does not fit a tensor of shape {}", what, to_string(p), to_string(s)));
  return d;
}

Shape local_shape(const Shape& global, const Placement& p, int tp, const std::string& what) {
  if (!p.is_shard()) return global;
  int d = checked_dim(p, global, what);
  if (global[d] % tp != 0)
    throw Error(fmt::format("{}: cannot shard dim {} of size {} (shape {}) over tp={}: {} is not divisible by {}", what,
                            p.dim, global[d], to_string(global), tp, global[d], tp));
  Shape l = global;
  l[d] /= tp;
  return l;
}

Shape global_shape(const Shape& local, const Placement& p, int tp, const std::string& what) {
  if (!p.is_shard()) return local;
  int d = checked_dim(p, local, what);
  Shape g = local;
  g[d] *= tp;
  return g;
}

// CollectiveKind's enumerators, in declaration order.
constexpr std::string_view kCollectiveKindNames[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"};
static_assert(std::size(kCollectiveKindNames) == enum_count(CollectiveKind::p2p));

std::string_view to_string(CollectiveKind k) { return name_of(kCollectiveKindNames, k); }

Redistribution plan_redistribution(const Placement& src, const Placement& dst, int ndim, const std::string& what) {
  Redistribution r;
  if (src.same_as(dst, ndim)) return r;
  using K = Placement::Kind;
  if (src.kind == K::partial && dst.kind == K::replicate) {
    r.collective = CollectiveKind::all_reduce;
  } else if (src.kind == K::partial && dst.kind == K::shard) {
    r.collective = CollectiveKind::reduce_scatter;
    r.scatter_dim = dst.normalized_dim(ndim);
  } else if (src.kind == K::shard && dst.kind == K::replicate) {
    r.collective = CollectiveKind::all_gather;
    r.gather_dim = src.normalized_dim(ndim);
  } else if (src.kind == K::replicate && dst.kind == K::shard) {
    r.local_slice = true;
    r.scatter_dim = dst.normalized_dim(ndim);
  } else if (src.kind == K::shard && dst.kind == K::shard) {
    r.collective = CollectiveKind::all_to_all;
    r.gather_dim = src.normalized_dim(ndim);
    r.scatter_dim = dst.normalized_dim(ndim);
  } else {
    throw Error(fmt::format("{}: cannot redistribute {} to {}", what, to_string(src), to_string(dst)));
  }
  return r;
}

Placement gradient_target(const Placement& src) { return src.is_partial() ? Placement::R() : src; }

int64_t collective_bytes(const Shape& global, int bytes_per_element) { return numel(global) * bytes_per_element; }

}  // namespace tptune
