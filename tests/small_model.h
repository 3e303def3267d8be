#pragma once
// Small models for simulator tests. small_model(): dim 512, 16 heads of 32 (8 kv heads), ffn 1024, vocab 1024.

#include <fmt/format.h>

#include <string>

#include "plans/config.h"
#include "plans/model.h"

namespace tptune::test {

inline Model small_model(int layers = 4) {
  Model m;
  m.name = "small";
  m.dim = 512;
  m.n_layers = layers;
  m.n_heads = 16;
  m.n_kv_heads = 8;
  m.ffn_dim = 1024;
  m.vocab_size = 1024;
  return m;
}

// A config of a 2-layer model (dim 512, 8 heads, ffn 1536, vocab 1024, seq 1024) on `nodes` x `gpus_per_node` H100s
// with the given `search:` section (a YAML flow map), as if loaded from `file`.
inline Config small_config(const std::string& file, int nodes, int gpus_per_node, const std::string& search) {
  return load_config_string(
      fmt::format("model: {{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 8, ffn_dim: 1536, vocab_size: 1024}}\n"
                  "training: {{seq_len: 1024, local_batch_size: 1}}\n"
                  "cluster: {{gpu: h100-sxm, nodes: {}, gpus_per_node: {}}}\nsearch: {}\n",
                  nodes, gpus_per_node, search),
      file);
}

}  // namespace tptune::test
