#pragma once
// Seeded, counter-based values for parameters and inputs, so that every rank — and the unsharded reference — builds
// the same full tensors and keeps its own shard.
//
// value(seed, name, i) depends only on the seed, the tensor's full name ("layers.1.attention.wq.weight", "tokens")
// and the flat index i in the FULL (unsharded) tensor; it is a uniform draw in [-1, 1) from a SplitMix64 hash of the
// three. Nothing depends on the TP degree, the rank or the order tensors are created in.
//
// Scales (a well-conditioned step, not a trained model):
//   linear and embedding weights (out, in):  u * sqrt(3 / in)    variance 1/in, so activations stay O(1)
//   norm weights (dim):                      1 + 0.1 u           ~1, but not exactly 1, so that dw matters
//   norm and linear biases (dim, out):       0.1 u
//   tokens and targets (b, s):               hash mod vocab      in [0, vocab)

#include <cstdint>
#include <string>
#include <vector>

#include "plans/language/placement.h"

namespace tptune {

// Uniform in [-1, 1).
float seeded_uniform(uint64_t seed, const std::string& name, int64_t index);
// The same draws with the (seed, name) part hashed once: seeded_uniform(seed, name, i) ==
// seeded_uniform_keyed(seeded_key(seed, name), i) (the name's hash is the costly part).
uint64_t seeded_key(uint64_t seed, const std::string& name);
float seeded_uniform_keyed(uint64_t key, int64_t index);
// Integer in [0, n).
int32_t seeded_index(uint64_t seed, const std::string& name, int64_t index, int64_t n);

// The full parameter `name` of global shape `full`.
std::vector<float> init_parameter(uint64_t seed, const std::string& name, const Shape& full);
// shard_of(init_parameter(seed, name, full), full, dim, parts, rank), drawing only the slice's elements: a rank of
// tp N draws 1/N of each sharded parameter instead of all of it (the 405B block at tp 8's local shapes: 1.3 G
// elements instead of 10.6 G).
std::vector<float> init_parameter_shard(uint64_t seed, const std::string& name, const Shape& full, int dim, int parts,
                                        int rank);
// Token ids (or targets) of global shape `full` in [0, vocab).
std::vector<int32_t> init_tokens(uint64_t seed, const std::string& name, const Shape& full, int64_t vocab);

// Rank `rank`'s slice of `dim` of a row-major tensor of shape `full` split in `parts` equal slices; dim -1 (or
// parts 1) returns the tensor itself.
template <class T>
std::vector<T> shard_of(const std::vector<T>& full, const Shape& shape, int dim, int parts, int rank);

}  // namespace tptune
