# The public record (issue 22): tp-plan accuracy --published against the committed figures
# (tests/integration/published_accuracy.sh says how to regenerate them), and the one-line errors of both --published
# commands. Included by CMakeLists.txt.
if(TARGET tp-plan)
  add_test(NAME "published: accuracy not worse than committed"
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/published_accuracy.sh $<TARGET_FILE:tp-plan> ${CMAKE_SOURCE_DIR})
  set_tests_properties("published: accuracy not worse than committed" PROPERTIES TIMEOUT 120 LABELS tp-plan)
  set(TPTUNE_RECORD ${CMAKE_SOURCE_DIR}/profiles/published)
  tptune_error_test("published: a run's bad config key names its file, line and key"
                    "^tp-plan: error: .*bad_seq_len.yaml:9: runs\\[0\\]\\.config\\.training\\.seq_len: expected an integer"
                    ${TP_PLAN} accuracy --published ${TPTUNE_BAD}/published)
  tptune_error_test("published: accuracy takes profiles or --published, not both"
                    "^tp-plan: error: --published .*: give either profile files or --published DIR, not both"
                    ${TP_PLAN} accuracy ${TPTUNE_RECORD}/README.md --published ${TPTUNE_RECORD})
  tptune_error_test("published: --fail-above-committed needs --published"
                    "^tp-plan: error: --fail-above-committed: expected --published DIR"
                    ${TP_PLAN} accuracy ${TPTUNE_RECORD}/README.md --fail-above-committed ${TPTUNE_RECORD}/README.md)
  tptune_error_test("published: calibrate --published needs --gpu"
                    "^tp-plan: error: --published: expected --gpu PRESET"
                    ${TP_PLAN} calibrate --published ${TPTUNE_RECORD} --fit gemm_efficiency)
  tptune_error_test("published: calibrate --gpu only with --published"
                    "^tp-plan: error: --gpu: expected only with --published DIR"
                    ${TP_PLAN} calibrate ${TPTUNE_RECORD}/README.md --out x.yaml --gpu h100-sxm)
  tptune_error_test("published: calibrate refuses an unknown parameter name"
                    "^tp-plan: error: --fit gemm_eficiency: unknown cost parameter. expected one of gemm_efficiency, "
                    ${TP_PLAN} calibrate --published ${TPTUNE_RECORD} --gpu a100-sxm-80gb --fit gemm_eficiency)
  tptune_error_test("published: calibrate refuses a GPU without runs"
                    "^tp-plan: error: --gpu b200: no predicted run of the record runs on it \\(its runs' GPUs: a100-sxm-80gb"
                    ${TP_PLAN} calibrate --published ${TPTUNE_RECORD} --gpu b200 --fit gemm_efficiency)
  tptune_error_test("published: accuracy refuses a calibration of a GPU without runs"
                    "^tp-plan: error: .*published_b200_calibration.yaml: device: fitted for 'b200', on which no predicted run"
                    ${TP_PLAN} accuracy --published ${TPTUNE_RECORD} --calibration
                    ${TPTUNE_BAD}/published_b200_calibration.yaml)
  # torchtitan's own MoE runs (issue 42): the expressible runs are predicted with their ep (DeepSeek-V3 16B's from
  # their MFU; #2107's DeepSeek-V3 671B with pp 8 too), the others listed with their reason (the predicted figures are not pinned here: docs/calibration.md
  # states them).
  add_test(NAME "published: the MoE record predicts its EP run and lists the runs it cannot express"
           COMMAND ${TP_PLAN} accuracy --published ${CMAKE_SOURCE_DIR}/profiles/published-moe)
  set_tests_properties("published: the MoE record predicts its EP run and lists the runs it cannot express"
                       PROPERTIES TIMEOUT 60 LABELS tp-plan PASS_REGULAR_EXPRESSION
                       "ep2-step10 +tp 1 bf16 ep 2 +h100-sxm-hbm2e-500w +86348.0 .*baseline +tp 1 bf16 ep 8 +b200 +16776.2 .*no-ac-compile-ep1-seq6144-lbs4 +tp 1 bf16 +b200 +23858.0 .*all-to-all +tp 1 bf16 pp 8 Interleaved1F1B mb 1 ep 32 +h100-sxm +346.0 .*DSv3 16B EP 1 / EP 8 .*not expressible.*torchtitan-pr1672-dsv3-16b-sac sac-save-a2a: the log contradicts its configuration.*torchtitan-pr2389-moe-gate-b200 bf16-gate-no-ac: the model and configuration are not stated")
  # Kernel-level measurements (issue 38): the fit of the architecture terms prints its residuals per GPU, and each
  # preset's sustained tensor rate beside what its own MSMF rows imply.
  add_test(NAME "kernels: calibrate --kernels fits the architecture terms and prints residuals per GPU"
           COMMAND ${TP_PLAN} calibrate --kernels ${CMAKE_SOURCE_DIR}/profiles/kernels)
  set_tests_properties("kernels: calibrate --kernels fits the architecture terms and prints residuals per GPU"
                       PROPERTIES TIMEOUT 60 LABELS tp-plan PASS_REGULAR_EXPRESSION
                       "hopper +gemm_efficiency .*residuals per GPU.*h100-sxm: [0-9]+ fitted rows, mean .error.*part level: h100-sxm-hbm2e-500w tensor_clock_fraction.*part level: h200 sustained_tensor_fraction 0.888 in its preset; its 2 sustained rows")
  tptune_error_test("kernels: a bad unit names its file, line and key"
                    "^tp-plan: error: .*bad_unit.yaml:12: measurements\\[0\\]\\.unit: expected one of fraction_of_peak, got 'GBps'"
                    ${TP_PLAN} calibrate --kernels ${TPTUNE_BAD}/kernels)
  tptune_error_test("kernels: calibrate --kernels stands alone"
                    "^tp-plan: error: --kernels .*: expected alone \\(not with --gpu\\)"
                    ${TP_PLAN} calibrate --kernels ${CMAKE_SOURCE_DIR}/profiles/kernels --gpu h100-sxm)
endif()
