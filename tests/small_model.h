#pragma once
// A small Llama-like model for simulator tests: dim 512, 16 heads of 32 (8 kv heads), ffn 1024, vocab 1024.

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

}  // namespace tptune::test
