// The memory model on a small model, with totals worked out by hand.
#include "sim/memory.h"

#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {}  // namespace

TEST_CASE("memory totals of a small model, sequence parallel, tp 2, dp 2") {
  Program p = test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true},
                                 test::small_model(), 256);
  GpuSpec h100 = gpu_preset("h100-sxm");
  CostParams c;
  MemoryReport m = memory_model(p, h100, c);
  // Parameters per block: norms 2 x 512; wq 512x512, wk and wv 256x512, wo 512x512 = 786432; w1, w3, w2
  // 3 x 1024x512 = 1572864. TP 2 halves the matrices: 1179648 + 1024 = 1180672 local elements per block.
  // Outside blocks: embedding 1024x512 / 2, output 1024x512 / 2, norm 512: 524800.
  // 4 x 1180672 + 524800 = 5247488 elements; 16 B each (fp32 master, grad, exp_avg, exp_avg_sq) over dp 2:
  // master and grads 4 x 5247488 / 2 = 10494976 B each, optimizer 20989952 B.
  CHECK(m.master_params == 10494976);
  CHECK(m.gradients == 10494976);
  CHECK(m.optimizer == 20989952);
  // Saved per block (b 1, s 256, h 512, tp 2; bf16 except fp32 statistics):
  //   input (1, 128, 512) 131072; attention_norm rstd (1, 128) fp32 512; gathered norm output (1, 256, 512) 262144;
  //   q after rope (1, 256, 256) 131072; k after rope and v (1, 256, 128) 2 x 65536; attention out 131072;
  //   lse (1, 8, 256) fp32 8192; residual (1, 128, 512) 131072; ffn_norm rstd 512; gathered ffn_norm output
  //   262144; w1, w3 outputs and swiglu (1, 256, 512) 3 x 262144.
  //   Total 1975296 B; 4 layers 7901184 B.
  CHECK(m.saved_per_block == 1975296);
  CHECK(m.activations == 7901184);
  // Two blocks of bf16 parameters in flight: 2 x 1180672 x 2 B.
  if (m.peak_phase != "head") CHECK(m.params_in_flight == 4722688);
  double tensors = m.model_states() + m.activations + m.working_set + m.params_in_flight;
  // The caching allocator reserves memory_fragmentation (0.1826, the stack's fit) over the tensors, plus 1.5 GiB of
  // runtime.
  CHECK(m.peak == Approx(tensors * 1.1826 + 1.5 * 1073741824.0));
  CHECK(m.fits);
  CHECK(m.headroom() > 70.0 * 1073741824.0);
}

TEST_CASE("full activation checkpointing saves only each block's input") {
  Program p = test::lower_preset(
      "sequence_parallel",
      {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true, .activation_checkpointing = ActivationCheckpointing::full},
      test::small_model(), 256);
  MemoryReport m = memory_model(p, gpu_preset("h100-sxm"), CostParams{});
  // (1, 128, 512) bf16 = 131072 B: Korthikanti's 2sbh, divided by tp with sequence parallel.
  CHECK(m.saved_per_block == 131072);
  MemoryReport none =
      memory_model(test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true},
                                      test::small_model(), 256),
                   gpu_preset("h100-sxm"), CostParams{});
  MemoryReport sel = memory_model(test::lower_preset("sequence_parallel",
                                                     {.tp_degree = 2,
                                                      .dp_shard = 2,
                                                      .loss_parallel = true,
                                                      .activation_checkpointing = ActivationCheckpointing::selective},
                                                     test::small_model(), 256),
                                  gpu_preset("h100-sxm"), CostParams{});
  CHECK(sel.saved_per_block < none.saved_per_block);
  CHECK(sel.saved_per_block > m.saved_per_block);
  // The recomputed block's activations come back during its backward.
  CHECK(m.working_set > none.working_set);
}

TEST_CASE("sequence parallel saves less activation memory than vanilla TP") {
  MemoryReport sp =
      memory_model(test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 1, .loss_parallel = true},
                                      test::small_model(), 256),
                   gpu_preset("h100-sxm"), CostParams{});
  MemoryReport va = memory_model(
      test::lower_preset("vanilla", {.tp_degree = 2, .dp_shard = 1, .loss_parallel = false}, test::small_model(), 256),
      gpu_preset("h100-sxm"), CostParams{});
  CHECK(sp.saved_per_block < va.saved_per_block);
  // Vanilla keeps the block input, the residual and the norm statistics replicated: (1, 256, 512) instead of
  // (1, 128, 512) for input and residual (2 x 131072 more), rstd (1, 256) instead of (1, 128) fp32 (2 x 512 more).
  CHECK(va.saved_per_block - sp.saved_per_block == 2 * 131072 + 2 * 512);
}

TEST_CASE("loss parallel keeps the logits vocab-sharded") {
  MemoryReport lp =
      memory_model(test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 1, .loss_parallel = true},
                                      test::small_model(), 256),
                   gpu_preset("h100-sxm"), CostParams{});
  MemoryReport no =
      memory_model(test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 1, .loss_parallel = false},
                                      test::small_model(), 256),
                   gpu_preset("h100-sxm"), CostParams{});
  // Logits (1, 256, 1024 / 2) bf16 = 262144 B with loss parallel; gathered (1, 256, 1024) = 524288 B without.
  CHECK(lp.logits == 262144);
  CHECK(no.logits == 524288);
}

TEST_CASE("torchtitan's fp32 loss: what its backward holds beyond the Program's bf16 logits") {
  auto head_ws = [](bool loss_parallel, bool fp32) {
    CostParams c;
    c.loss_in_fp32 = fp32;
    return memory_parts(
               test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 1, .loss_parallel = loss_parallel},
                                  test::small_model(), 256),
               c)
        .ws_head;
  };
  // aten's fused loss (the full vocabulary on every rank): saved fp32 log-probs, nll's fp32 gradient and
  // log_softmax_backward's output, 12 B per logit, of which the Program's bf16 logits and d_logits hold 4: 8 more
  // per element of (1, 256, 1024) = 8 x 262144 = 2097152 B.
  CHECK(head_ws(false, true) - head_ws(false, false) == 2097152);
  // loss_parallel's backward (torch/distributed/tensor/parallel/loss.py): saved log-probs, zeros_like, exp and their
  // sum live together, 16 B: 12 more per element of the vocab-sharded (1, 256, 512) = 12 x 131072 = 1572864 B.
  CHECK(head_ws(true, true) - head_ws(true, false) == 1572864);
}

TEST_CASE("a plan that does not fit says by how much") {
  Program p = test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 1, .loss_parallel = true},
                                 test::small_model(), 256);
  GpuSpec tiny = gpu_preset("h100-sxm");
  tiny.memory_GiB = 1.0;  // less than the runtime overhead alone
  MemoryReport m = memory_model(p, tiny, CostParams{});
  CHECK_FALSE(m.fits);
  CHECK(m.headroom() < 0);
}

TEST_CASE("tied embeddings: one weight's model states, and the FSDP unit stays unsharded all step") {
  Model tied = test::model_named("tiny-llama");  // dim 64, 2 layers, vocab 256: block 36,992 parameters
  tied.tie_word_embeddings = true;
  Model untied = tied;
  untied.tie_word_embeddings = false;
  const Training t{.seq_len = 16};
  const Plan plan = test::make_plan("sequence_parallel", {.tp_degree = 1, .dp_shard = 2});
  const CostParams c;
  const MemoryParts pt = memory_parts(lower(tied, t, plan), c);
  const MemoryParts pu = memory_parts(lower(untied, t, plan), c);
  // Elements: tied 256x64 + 2 x 36,992 + 64 = 90,432; untied + 256x64 = 106,816. fp32 master and gradient 4 B each,
  // AdamW 8 B, over dp 2: tied 180,864 / 180,864 / 361,728 B; untied 213,632 / 213,632 / 427,264 B.
  CHECK(pt.master_params == 180'864);
  CHECK(pt.gradients == 180'864);
  CHECK(pt.optimizer == 361'728);
  CHECK(pu.master_params == 213'632);
  CHECK(pu.optimizer == 427'264);
  // The head reads the table and the final norm (bf16, unsharded while it runs): (16,384 + 64) x 2 B = 32,896 B in
  // both; untied it reads output.weight, as large.
  CHECK(pt.head_params == 32'896);
  CHECK(pu.head_params == 32'896);
  // Tied, the unit [tok_embeddings, norm, output] is not resharded after forward (torchtitan), so those 32,896 B are
  // in flight in the forward and backward phases too; untied nothing is.
  CHECK(pt.resident_params == 32'896);
  CHECK(pu.resident_params == 0);
  const GpuSpec gpu = gpu_preset("h100-sxm");
  const MemoryReport mt = memory_from_parts(pt, gpu, c);
  if (mt.peak_phase == "forward")
    CHECK(mt.params_in_flight == std::max(1, c.blocks_in_flight) * pt.block_params + 32'896);
  // Without FSDP nothing is resharded anyway: no resident term.
  CHECK(memory_parts(lower(tied, t, test::make_plan("sequence_parallel", {.tp_degree = 1})), c).resident_params == 0);
}
