#include "runtime/tensor_init.h"

#include <cmath>

#include "plans/util/error.h"

namespace tptune {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {  // FNV-1a, then mixed
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return splitmix64(h);
}

// The per-tensor part of a draw, hashed once per tensor: the name's hash is the costly part (19-22 ns an element when
// it was recomputed for each one), the per-element part is one SplitMix64 step.
uint64_t tensor_key(uint64_t seed, const std::string& name) { return splitmix64(seed ^ hash_name(name)); }

uint64_t draw_keyed(uint64_t key, int64_t index) { return splitmix64(key + static_cast<uint64_t>(index)); }

uint64_t draw(uint64_t seed, const std::string& name, int64_t index) {
  return draw_keyed(tensor_key(seed, name), index);
}

// 24 random bits -> [0, 1) exactly representable in float, then [-1, 1).
float uniform_of(uint64_t bits) { return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

float seeded_uniform(uint64_t seed, const std::string& name, int64_t index) {
  return uniform_of(draw(seed, name, index));
}

uint64_t seeded_key(uint64_t seed, const std::string& name) { return tensor_key(seed, name); }

float seeded_uniform_keyed(uint64_t key, int64_t index) { return uniform_of(draw_keyed(key, index)); }

int32_t seeded_index(uint64_t seed, const std::string& name, int64_t index, int64_t n) {
  return static_cast<int32_t>(draw(seed, name, index) % static_cast<uint64_t>(n));
}

namespace {

// The value of element i (its flat index in the full tensor) of a parameter: the scales of tensor_init.h.
struct ParameterDraw {
  uint64_t key;
  float scale, offset;  // value = offset + scale * u
  float operator()(int64_t i) const { return offset + scale * uniform_of(draw_keyed(key, i)); }
};

ParameterDraw parameter_draw(uint64_t seed, const std::string& name, const Shape& full) {
  const uint64_t key = tensor_key(seed, name);
  if (full.size() == 1)
    return ends_with(name, "bias") ? ParameterDraw{key, 0.1f, 0.0f} : ParameterDraw{key, 0.1f, 1.0f};
  const double fan_in = static_cast<double>(full.back());
  return {key, static_cast<float>(std::sqrt(3.0 / fan_in)), 0.0f};
}

// Slice `rank` of `dim` of a row-major `shape` in `parts` equal slices: `outer` runs of `width` consecutive elements,
// run o starting at o * row + rank * width in the full tensor.
struct Slice {
  int64_t outer, width, row, first;
};

Slice slice_of(const Shape& shape, int dim, int parts, int rank) {
  if (dim >= static_cast<int>(shape.size()) || shape[size_t(dim)] % parts != 0 || rank < 0 || rank >= parts)
    throw Error("shard_of: cannot take slice " + std::to_string(rank) + " of dim " + std::to_string(dim) + " of " +
                to_string(shape) + " in " + std::to_string(parts) + " parts");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[size_t(d)];
  for (size_t d = size_t(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t width = shape[size_t(dim)] / parts * inner;
  return {outer, width, shape[size_t(dim)] * inner, rank * width};
}

}  // namespace

std::vector<float> init_parameter(uint64_t seed, const std::string& name, const Shape& full) {
  const ParameterDraw value = parameter_draw(seed, name, full);
  std::vector<float> v(static_cast<size_t>(numel(full)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(static_cast<int64_t>(i));
  return v;
}

std::vector<float> init_parameter_shard(uint64_t seed, const std::string& name, const Shape& full, int dim, int parts,
                                        int rank) {
  if (dim < 0 || parts == 1) return init_parameter(seed, name, full);
  const ParameterDraw value = parameter_draw(seed, name, full);
  const Slice s = slice_of(full, dim, parts, rank);
  std::vector<float> out(static_cast<size_t>(s.outer * s.width));
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.width; ++i) out[size_t(o * s.width + i)] = value(o * s.row + s.first + i);
  return out;
}

std::vector<int32_t> init_tokens(uint64_t seed, const std::string& name, const Shape& full, int64_t vocab) {
  const int64_t n = numel(full);
  std::vector<int32_t> v(static_cast<size_t>(n));
  const uint64_t key = tensor_key(seed, name);
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = static_cast<int32_t>(draw_keyed(key, i) % static_cast<uint64_t>(vocab));
  return v;
}

template <class T>
std::vector<T> shard_of(const std::vector<T>& full, const Shape& shape, int dim, int parts, int rank) {
  if (dim < 0 || parts == 1) return full;
  const Slice s = slice_of(shape, dim, parts, rank);
  std::vector<T> out(static_cast<size_t>(s.outer * s.width));
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.width; ++i) out[size_t(o * s.width + i)] = full[size_t(o * s.row + s.first + i)];
  return out;
}

template std::vector<float> shard_of(const std::vector<float>&, const Shape&, int, int, int);
template std::vector<int32_t> shard_of(const std::vector<int32_t>&, const Shape&, int, int, int);

}  // namespace tptune
