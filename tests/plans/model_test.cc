// Model: presets, torchtitan's ffn_dim rule, parameter and FLOP counts against hand-derived values.
#include "plans/model/model.h"

#include <catch2/catch.hpp>

#include "tests/fixtures.h"

using namespace tptune;

using test::model_named;

TEST_CASE("mlp and norm kinds print their config names", "[model]") {
  CHECK(to_string(Mlp::swiglu) == "swiglu");
  CHECK(to_string(Mlp::gelu) == "gelu");
  CHECK(to_string(Norm::rmsnorm) == "rmsnorm");
  CHECK(to_string(Norm::layernorm) == "layernorm");
}

TEST_CASE("torchtitan_ffn_dim reproduces the Llama 3 hidden sizes", "[model]") {
  // 8B:   4*4096 = 16384; int(2*16384/3) = 10922; int(1.3*10922) = int(14198.6) = 14198; up to 1024: 14*1024 = 14336.
  CHECK(torchtitan_ffn_dim(4096, 1.3, 1024) == 14336);
  // 70B:  4*8192 = 32768; int(65536/3) = 21845; int(1.3*21845) = int(28398.5) = 28398; up to 4096: 7*4096 = 28672.
  CHECK(torchtitan_ffn_dim(8192, 1.3, 4096) == 28672);
  // 405B: 4*16384 = 65536; int(131072/3) = 43690; int(1.2*43690) = 52428; up to 4096: 13*4096 = 53248.
  CHECK(torchtitan_ffn_dim(16384, 1.2, 4096) == 53248);
  // No multiplier: 4*64 = 256; int(512/3) = 170; up to 256: 256.
  CHECK(torchtitan_ffn_dim(64, 1.0, 256) == 256);
  // Already a multiple: 4*3 = 12; int(24/3) = 8; multiple_of 8 keeps 8.
  CHECK(torchtitan_ffn_dim(3, 1.0, 8) == 8);
}

TEST_CASE("Llama 3 presets have torchtitan's dimensions", "[model]") {
  const Model m8 = model_named("llama3-8b");
  CHECK(m8.name == "llama3-8b");
  CHECK(m8.dim == 4096);
  CHECK(m8.n_layers == 32);
  CHECK(m8.n_heads == 32);
  CHECK(m8.n_kv_heads == 8);
  CHECK(m8.ffn_dim == 14336);
  CHECK(m8.vocab_size == 128256);
  CHECK(m8.rope_theta == 500000.0);
  CHECK(m8.mlp == Mlp::swiglu);
  CHECK(m8.norm == Norm::rmsnorm);
  CHECK(m8.head_dim() == 128);

  const Model m70 = model_named("llama3-70b");
  CHECK(m70.dim == 8192);
  CHECK(m70.n_layers == 80);
  CHECK(m70.n_heads == 64);
  CHECK(m70.n_kv_heads == 8);
  CHECK(m70.ffn_dim == 28672);
  CHECK(m70.vocab_size == 128256);

  const Model m405 = model_named("llama3-405b");
  CHECK(m405.dim == 16384);
  CHECK(m405.n_layers == 126);
  CHECK(m405.n_heads == 128);
  CHECK(m405.n_kv_heads == 8);
  CHECK(m405.ffn_dim == 53248);
}

TEST_CASE("tiny presets match the example configs", "[model]") {
  const Model l = model_named("tiny-llama");
  CHECK(l.dim == 64);
  CHECK(l.n_layers == 2);
  CHECK(l.n_heads == 8);
  CHECK(l.n_kv_heads == 4);
  CHECK(l.ffn_dim == 128);
  CHECK(l.vocab_size == 256);
  CHECK(l.mlp == Mlp::swiglu);
  CHECK(l.norm == Norm::rmsnorm);
  const Model g = model_named("tiny-gpt");
  CHECK(g.n_kv_heads == g.n_heads);
  CHECK(g.mlp == Mlp::gelu);
  CHECK(g.norm == Norm::layernorm);
}

TEST_CASE("unknown presets are reported, known names are listed", "[model]") {
  Model m;
  m.dim = 7;
  CHECK_FALSE(model_preset("llama3-7b", m));
  CHECK(m.dim == 7);  // untouched
  const auto names = model_preset_names();
  for (const char* n : {"llama3-8b", "llama3-70b", "llama3-405b", "tiny-llama", "tiny-gpt"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  for (const auto& n : names) CHECK(model_preset(n, m));
}

TEST_CASE("presets carry the ffn rule they were defined with", "[model]") {
  double mult = 0;
  int64_t multiple_of = 0;
  REQUIRE(model_preset_ffn_rule("llama3-70b", mult, multiple_of));
  CHECK(mult == 1.3);
  CHECK(multiple_of == 4096);
  REQUIRE(model_preset_ffn_rule("llama3-405b", mult, multiple_of));
  CHECK(mult == 1.2);
  CHECK_FALSE(model_preset_ffn_rule("tiny-llama", mult, multiple_of));
  CHECK_FALSE(model_preset_ffn_rule("nope", mult, multiple_of));
}

TEST_CASE("Llama 3 8B has 8,030,261,248 parameters", "[model]") {
  const Model m = model_named("llama3-8b");
  // head_dim 128. Attention: wq 4096x4096 + wk, wv 2 x (1024x4096) = 4096 x (32 + 2*8) x 128 = 25,165,824;
  // wo 4096 x 4096 = 16,777,216; together 41,943,040.
  // MLP: 3 x 4096 x 14336 = 176,160,768. Norms: 2 x 4096 = 8,192. Block: 218,112,000.
  CHECK(m.block_parameters() == 218'112'000);
  // Embedding 128256 x 4096 = 525,336,576 (and the same again for the untied output).
  CHECK(m.embedding_parameters() == 525'336'576);
  // 32 x 218,112,000 = 6,979,584,000; + 2 x 525,336,576 = 1,050,673,152; + final norm 4,096.
  CHECK(m.total_parameters() == 8'030'261'248);
}

TEST_CASE("Llama 3 70B has 70,553,706,496 parameters", "[model]") {
  const Model m = model_named("llama3-70b");
  // Attention: 8192 x (64 + 16) x 128 = 83,886,080 + wo 8192 x 8192 = 67,108,864 -> 150,994,944.
  // MLP: 3 x 8192 x 28672 = 704,643,072. Norms 16,384. Block: 855,654,400.
  CHECK(m.block_parameters() == 855'654'400);
  // 80 x 855,654,400 = 68,452,352,000; embedding + output 2 x 128256 x 8192 = 2,101,346,304; final norm 8,192.
  CHECK(m.total_parameters() == 70'553'706'496);
}

TEST_CASE("tiny models: gelu drops w3, layernorm adds biases", "[model]") {
  const Model l = model_named("tiny-llama");
  // head_dim 8. Attention 64 x (8 + 2*4) x 8 = 8,192 + wo 64 x 64 = 4,096. MLP 3 x 64 x 128 = 24,576.
  // Norms 2 x 64 = 128. Block 36,992. Total 256x64 + 2 x 36,992 + 64 + 256x64 = 16,384 + 73,984 + 64 + 16,384.
  CHECK(l.block_parameters() == 36'992);
  CHECK(l.total_parameters() == 106'816);
  const Model g = model_named("tiny-gpt");
  // Attention 64 x (4 + 8) x 16 = 12,288 + 4,096 = 16,384. MLP 2 x 64 x 128 = 16,384. Norms 2 x (64 + 64) = 256.
  // Block 33,024. Total 16,384 + 2 x 33,024 + 128 + 16,384 = 98,944.
  CHECK(g.block_parameters() == 33'024);
  CHECK(g.total_parameters() == 98'944);
}

TEST_CASE("training flops per token follow torchtitan's MFU convention", "[model]") {
  const Model m = model_named("llama3-8b");
  // 6 x (8,030,261,248 - 525,336,576) = 6 x 7,504,924,672 = 45,029,548,032
  // 12 x 32 layers x 32 heads x 128 x 8192 = 12,884,901,888; sum 57,914,449,920.
  CHECK(m.training_flops_per_token(8192) == 57'914'449'920.0);
  // The attention term is linear in seq_len: halving it removes half of 12,884,901,888.
  CHECK(m.training_flops_per_token(4096) == 57'914'449'920.0 - 6'442'450'944.0);
}
