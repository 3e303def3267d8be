# libFuzzer targets for the loaders (tests/fuzz/): -DTPTUNE_FUZZ=ON, with clang (libFuzzer ships with clang; Debian:
# clang and libclang-rt-<version>-dev). A fuzz build is its own small build directory: it compiles the loaders it
# needs (plans/, the GPU spec reader of sim/) with libFuzzer's coverage instrumentation, ASan and UBSan, and nothing
# else (no tools, tests or benchmarks):
#
#   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DTPTUNE_FUZZ=ON
#   cmake --build build-fuzz
#   tests/fuzz/run-fuzzers build-fuzz 60        # every target for 60 s on its seed corpus (what .ci/run does)
#
# Included by the top CMakeLists.txt, which stops after it when TPTUNE_FUZZ is ON.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "TPTUNE_FUZZ needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++ (got ${CMAKE_CXX_COMPILER_ID})")
endif()
if(TPTUNE_SANITIZE)
  message(FATAL_ERROR "TPTUNE_FUZZ sets its own sanitizers (address,undefined); leave TPTUNE_SANITIZE empty")
endif()

# -O1 with line tables: fast enough to fuzz, still symbolized stack traces. Everything compiled here is
# instrumented (fuzzer-no-link); only the fuzz executables link libFuzzer's main (-fsanitize=fuzzer).
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -O1 -gline-tables-only)
add_link_options(-fsanitize=address,undefined)

add_subdirectory(plans)
# The simulator is configured only for its generated GPU preset table; the fuzz targets compile just the GPU spec
# reader (the loader of inline `cluster.gpu` maps and of the presets).
add_subdirectory(sim sim EXCLUDE_FROM_ALL)
add_library(tptune_fuzz_gpu_spec STATIC ${CMAKE_SOURCE_DIR}/sim/gpu_spec.cc
                                        ${CMAKE_SOURCE_DIR}/sim/cost/cost_param_fields.cc  # a spec's cost_params section
                                        ${CMAKE_SOURCE_DIR}/sim/cost/cost_params.cc
                                        ${CMAKE_BINARY_DIR}/sim/gpu_presets_data.cc)
target_include_directories(tptune_fuzz_gpu_spec PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(tptune_fuzz_gpu_spec PUBLIC tptune_plans)

add_subdirectory(tests/fuzz)
