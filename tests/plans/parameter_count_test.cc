// Parameter counts (plans/lower/parameter_count.h): the model's total and what one rank holds after TP and FSDP
// sharding, against hand arithmetic from the shapes of Llama 3 8B (dim 4096, 32 layers, 32 heads / 8 kv of head_dim
// 128, ffn 14336, vocab 128256).
#include "plans/lower/parameter_count.h"

#include <catch2/catch.hpp>

#include "lowering_helpers.h"

using namespace tptune;
using namespace tptune::testing;

TEST_CASE("the total is the model's: Llama 3 8B has 8,030,261,248 parameters") {
  // tok_embeddings and output 2 x 128256 x 4096 = 1,050,673,152; a block: wq 4096 x 4096 + wk, wv 1024 x 4096 each
  // + wo 4096 x 4096 = 41,943,040, w1, w2, w3 3 x 4096 x 14336 = 176,160,768, two norms 8,192: 218,112,000; x 32 =
  // 6,979,584,000; final norm 4,096. Sum 8,030,261,248 (the model card's 8.03 B).
  const Program p = lower_preset("vanilla", {.tp_degree = 8});
  CHECK(parameter_count(p).total == 8030261248);
  CHECK(parameter_count(p).total == p.model.total_parameters());
}

TEST_CASE("per rank at tp 8: the TP shards, with the replicated norms whole") {
  // tp 8: tok_embeddings (vocab-sharded rowwise) and output (colwise) 16032 x 4096 = 65,667,072 each; final norm
  // 4,096 (replicated). A block: wq 512 x 4096 = 2,097,152, wk and wv 128 x 4096 = 524,288 each, wo 4096 x 512 =
  // 2,097,152, w1 and w3 1792 x 4096 = 7,340,032 each, w2 4096 x 1792 = 7,340,032, norms 2 x 4,096: 27,271,168;
  // x 32 = 872,677,376. Sum 131,334,144 + 4,096 + 872,677,376 = 1,004,015,616 (= 8,030,261,248 / 8 + 7/8 of the
  // 266,240 norm parameters, which every TP rank holds whole).
  for (const char* preset : {"vanilla", "sequence_parallel"}) {
    CAPTURE(preset);
    CHECK(parameter_count(lower_preset(preset, {.tp_degree = 8})).per_rank == 1004015616);
  }
}

TEST_CASE("per rank at tp 8 x dp_shard N: FSDP2 chunks each local shard along dim 0, rank 0 holds ceil(rows / N)") {
  // dp_shard 2: every dim 0 is even, so exactly half of tp 8's 1,004,015,616.
  CHECK(parameter_count(lower_preset("vanilla", {.tp_degree = 8, .dp_shard = 2})).per_rank == 502007808);
  // dp_shard 3: embedding and output 16032 / 3 = 5344 rows x 4096 = 21,889,024 each; final norm ceil(4096 / 3) =
  // 1,366. A block: wq ceil(512/3) = 171 rows x 4096 = 700,416; wk, wv 43 x 4096 = 176,128 each; wo 1366 x 512 =
  // 699,392; w1, w3 598 x 4096 = 2,449,408 each; w2 1366 x 1792 = 2,447,872; norms 2 x 1,366: 9,101,484; x 32 =
  // 291,247,488. Sum 43,778,048 + 1,366 + 291,247,488 = 335,026,902.
  CHECK(parameter_count(lower_preset("vanilla", {.tp_degree = 8, .dp_shard = 3})).per_rank == 335026902);
}

TEST_CASE("per rank at tp 1 without FSDP is the whole model, for every model preset") {
  // The lowering's parameter tensors and Model::total_parameters() agree on every architecture (rmsnorm / layernorm
  // with its bias, swiglu / gelu).
  for (const std::string& name : model_preset_names()) {
    CAPTURE(name);
    const Program p = lower_preset("vanilla", {.tp_degree = 1}, test::model_named(name), 128);
    CHECK(parameter_count(p).per_rank == parameter_count(p).total);
  }
}

TEST_CASE("counts print with thousands separators") {
  CHECK(with_thousands(0) == "0");
  CHECK(with_thousands(999) == "999");
  CHECK(with_thousands(1000) == "1,000");
  CHECK(with_thousands(8030261248) == "8,030,261,248");
  CHECK(with_thousands(-1234567) == "-1,234,567");
}

TEST_CASE("a pp rank's share says so, and never 'all of them'", "[pp]") {
  // Issue 37: pp 2 at tp 1 without FSDP printed "per GPU N: all of them" for one rank's stages.
  const ParameterCount pp{100, 70, {30, 70}, 1};
  CHECK(shard_text(pp, 1, 1) == "pp rank 1's stages (the most of 2 pp ranks; the least holds 30)");
  CHECK(shard_text(pp, 8, 2) ==
        "pp rank 1's stages (the most of 2 pp ranks; the least holds 30), its tp 8 shard, chunked over dp_shard 2 by "
        "FSDP");
  // Without PP, as before.
  const ParameterCount flat{100, 100, {}, 0};
  CHECK(shard_text(flat, 1, 1) == "all of them");
  CHECK(shard_text(flat, 1, 4) == "all of them, chunked over dp_shard 4 by FSDP");
  CHECK(shard_text(flat, 8, 2, 4) == "its tp 8 shard, chunked over dp_shard 2 x cp 4 by FSDP");
}
