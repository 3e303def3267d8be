# Tied input/output embeddings (issue 26): the Llama 3.2 1B and 3B config.json, shrunk, verify sharded == unsharded
# at tp 2; wrong plans fail on them (a numerically wrong one: verify FAIL; one that places the shared weight two ways:
# refused by lowering, naming the output); the torchtitan export refuses them naming the feature. Included by
# CMakeLists.txt.
if(TARGET tp-plan AND TARGET tp-run)
  foreach(size 1b 3b)
    set(hf ${TPTUNE_EXAMPLES}/hf/llama3.2-${size}/config.json)
    tptune_expect_test("tp-run verify --shrink: Llama 3.2 ${size} (tied) at tp 2" 0
                       "verify: PASS — tp 2, 20 parameter gradients"
                       ${TPTUNE_MPIRUN} -np 2 ${TP_RUN} verify ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml --hf-config ${hf}
                       --preset sequence_parallel --backend cpu --shrink)
    tptune_expect_test("tp-run verify --shrink: wrong_wo_partial fails on Llama 3.2 ${size} (tied)" 1 "verify: FAIL"
                       ${TPTUNE_MPIRUN} -np 2 ${TP_RUN} verify ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml --hf-config ${hf}
                       --plan ${TPTUNE_PLANS}/wrong_wo_partial.yaml --backend cpu --shrink)
    tptune_expect_test("tp-run verify --shrink: a tied weight placed two ways is refused on Llama 3.2 ${size}" 2
                       "output: its weight is tok_embeddings.weight \\(tie_word_embeddings\\), which tok_embeddings holds on the model dim \\(S\\(1\\)\\) but this style would hold on the vocab dim \\(S\\(0\\)\\)"
                       ${TPTUNE_MPIRUN} -np 2 ${TP_RUN} verify ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml --hf-config ${hf}
                       --plan ${TPTUNE_PLANS}/wrong_tied_placement.yaml --backend cpu --shrink)
  endforeach()
  # Qwen2.5 0.5B: tied embeddings and q/k/v biases together (14 heads, 2 kv heads: tp 2 divides both).
  tptune_expect_test("tp-run verify --shrink: Qwen2.5 0.5B (tied, q/k/v biases) at tp 2" 0 "verify: PASS"
                     ${TPTUNE_MPIRUN} -np 2 ${TP_RUN} verify ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml
                     --hf-config ${TPTUNE_EXAMPLES}/hf/qwen2.5-0.5b/config.json --preset sequence_parallel
                     --backend cpu --shrink)
  tptune_expect_test("tp-run verify --shrink: wrong_qkv_partial fails on Qwen2.5 0.5B" 1 "verify: FAIL"
                     ${TPTUNE_MPIRUN} -np 2 ${TP_RUN} verify ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml
                     --hf-config ${TPTUNE_EXAMPLES}/hf/qwen2.5-0.5b/config.json
                     --plan ${TPTUNE_PLANS}/wrong_qkv_partial.yaml --backend cpu --shrink)
  tptune_expect_test("tp-plan simulate: Llama 3.2 1B (tied) simulates" 0 "meta-llama/Llama-3\\.2-1B on"
                     $<TARGET_FILE:tp-plan> simulate ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml
                     --hf-config ${TPTUNE_EXAMPLES}/hf/llama3.2-1b/config.json --preset sequence_parallel)
  tptune_error_test("tp-plan export: a tied model is refused naming the feature"
                    "^tp-plan: error: model 'meta-llama/Llama-3.2-3B': tied input/output embeddings \\(tie_word_embeddings\\): torchtitan 0.3 ties them only in its llama3 1B and 3B flavors"
                    $<TARGET_FILE:tp-plan> export ${TPTUNE_PLANS}/tt03_8b_tp8.yaml
                    --config ${TPTUNE_EXAMPLES}/llama3-8b-h100.yaml
                    --hf-config ${TPTUNE_EXAMPLES}/hf/llama3.2-3b/config.json)
endif()
