# The short held-out calibration loop (issue 10), label `calibration`, in every ctest run: profiles a calibration
# set on CPU ranks (tiny Llamas at head dims 8-32 and seq 32-96, tp 1-2, a float8 vanilla run, the collectives at
# np 2 and 4, a GEMM grid, copy/add), calibrates, profiles a held-out set (128d at head dim 16: SP and vanilla at tp 4, SP
# float8 and SP async TP at tp 2) and fails when a calibrated prediction of a held-out run is off by more than the
# bound. 9-18 s on 2 cores at load 3-6 (the script prints its time, the load and the held-out table; ctest prints the
# test's time).
# RUN_SERIAL (not under the sanitizers): it times things, so no other test shares the cores with it.
#
# What is bounded, and why this bound. The serialized *compute* time of each held-out run (the sum of its compute
# ops, each timed alone, with --statistic min: each op's least-disturbed of 9 iterations; --fail-on compute), not
# the overlapped step wall and not the collectives: an overlapped CPU step stalls for whole scheduler slices when
# anything else runs on the machine (measured here: 10 ms of serialized work at 26-92 ms of wall beside two
# compilers), and a collective timed alone also waits for the ranks still computing; neither is what the cost model
# describes. Calibrated compute errors of the 4 held-out runs on a shared 2-vCPU machine: -4% to -9% when it is quiet
# (medians); with the calibration and held-out profiles alternating (the script's order, so that load drift hits both
# sets) and the machine loaded (mins, the CI form), down to about -28%. The worst is a tp 4 run (4 ranks on 2 cores:
# long compute stretches between collectives get preempted, which ops timed alone are modelled not to be). 35% is above
# that noise and below the model errors this loop exists to catch: float8 casts costed as memory-bound passes (-50%
# on the float8 run), attention proportional to its FLOPs with ranks that do not share the machine (-31% to -35% on
# every run: at the bound, so caught only together with anything else). The
# calibrated collectives are checked by the unit tests (synthetic data fitted back), the overlapped steps and the
# Kendall tau by bench/calibration-loop.sh on a quiet machine (its summary table). Two attempts (--attempts 2): the
# test fails only when both exceed the bound, as a model error does; one CI run on a loaded 2-core runner exceeded 35%
# once where the same build measured 17.7% at worst here. Override with
# -DTPTUNE_CALIBRATION_COMPUTE_BOUND_PCT=N, or turn the test off with -DTPTUNE_SKIP_CALIBRATION_LOOP=ON.
# (An option and a bound of their own, not the old opt-in TPTUNE_CALIBRATION_LOOP and TPTUNE_CALIBRATION_BOUND_PCT,
# whose values stay in the caches of build directories configured before: OFF and 35 on the serialized step.)
option(TPTUNE_SKIP_CALIBRATION_LOOP "do not register the short held-out calibration loop as a ctest" OFF)
set(TPTUNE_CALIBRATION_COMPUTE_BOUND_PCT 35 CACHE STRING
    "held-out serialized compute error bound of the calibration loop test (%)")
# Under ASan/UBSan (TPTUNE_SANITIZE) the loop still runs end to end (profile, calibrate, accuracy under the
# sanitizers), but the times it fits and checks are the instrumented binaries' (shadow-memory checks slow memory-bound
# ops several times more than GEMMs): no accuracy bound there, only a 10x one that catches a broken pipeline.
set(tptune_calibration_bound ${TPTUNE_CALIBRATION_COMPUTE_BOUND_PCT})
if(TPTUNE_SANITIZE)
  set(tptune_calibration_bound 1000)
endif()
if(NOT TPTUNE_SKIP_CALIBRATION_LOOP)
  add_test(NAME "calibration: held-out loop (short)"
           COMMAND ${CMAKE_SOURCE_DIR}/bench/calibration-loop.sh --short --statistic min --build ${CMAKE_BINARY_DIR}
                   --out ${CMAKE_BINARY_DIR}/calibration-loop-ci --bound ${tptune_calibration_bound}
                   --fail-on compute --attempts 2)
  set_tests_properties("calibration: held-out loop (short)" PROPERTIES LABELS "calibration;mpi;tp-run" TIMEOUT 600)
  # Alone on the cores only where its times are bounded: under the sanitizers it ran 145 s serially, the other tests
  # waiting, for a bound that only catches a broken pipeline.
  if(NOT TPTUNE_SANITIZE)
    set_tests_properties("calibration: held-out loop (short)" PROPERTIES RUN_SERIAL TRUE)
  endif()
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
