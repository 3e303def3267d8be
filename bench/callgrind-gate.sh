#!/usr/bin/env bash
# callgrind-gate.sh [BUILD_DIR] [--runs N] [--update] [--no-wall]
#
# The speed regression gate of this project's CI. Wall time on shared 2-core machines moves by tens of percent, so
# the gate counts instructions instead: each item runs under `valgrind --tool=callgrind`, only its measured region
# is counted (callgrind client requests in bench/bench_gate.cc; --toggle-collect=tptune::verify_step for tp-run),
# and the counts are compared with bench/baseline/callgrind.json: an item that moved by more than the baseline's
# tolerance (3 %) fails the gate (exit 1). Items:
#   lower_405b          10 x lower() of Llama3-405B, tp 8, sequence parallel, FSDP 128
#   simulate_405b       10 x simulate() of that Program on 128 x 8 H100s
#   search_405b         the default search of examples/llama3-405b-h100.yaml (1080 candidates), 1 thread
#   verify_tiny_llama   tp-run verify examples/tiny-llama.yaml --preset sequence_parallel at tp 1, one process
#                       (verify_step only). Under mpirun -np 2 rank 0's count moved by ~17% between runs (MPI
#                       progress polling while it waits for the other rank), so the gate runs tp 1 without mpirun:
#                       the executor, the CPU kernels and the verifier, with a repeatable count.
# Then, as information only, wall-time medians of the same workloads (Google Benchmark, 5 repetitions) and their
# ratios to BM_Reference of the same run.
#
#   --runs N    run every item N times and print each count and the spread (the gate compares the median)
#   --update    write the counts to bench/baseline/callgrind.json instead (bench/update-baseline.sh)
#   --no-wall   skip the wall-time report
# Counts depend on the compiler and libraries: the baseline is for the CI image (Debian 12, g++ 12, Release).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"; runs=1; update=""; wall=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --update) update="--update" ;;
    --no-wall) wall=0 ;;
    -*) echo "callgrind-gate: unknown option $1" >&2; exit 2 ;;
    *) build="$(cd "$1" && pwd)" ;;
  esac
  shift
done
gate="$build/bench/bench_gate"; tp_run="$build/tools/tp-run"
for exe in "$gate" "$tp_run"; do
  [ -x "$exe" ] || { echo "callgrind-gate: $exe missing: cmake --build $build --target bench_gate tp-run" >&2; exit 2; }
done
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")
if [ "$build_type" != "Release" ]; then
  echo "callgrind-gate: $build is a '$build_type' build; the baseline is for Release" >&2; exit 2
fi
command -v valgrind > /dev/null || { echo "callgrind-gate: valgrind not found (apt-get install valgrind)" >&2; exit 2; }

cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
items=(lower_405b simulate_405b search_405b verify_tiny_llama)

# count ITEM OUT: runs ITEM once under callgrind; prints the instructions of its measured region.
count() {
  local item="$1" out="$2"
  if [ "$item" = verify_tiny_llama ]; then
    valgrind --tool=callgrind --toggle-collect='tptune::verify_step*' --callgrind-out-file="$out" \
      "$tp_run" verify "$root/examples/tiny-llama.yaml" --preset sequence_parallel --tp 1 > "$out.log" 2>&1
  else
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "$gate" --run "$item" > "$out.log" 2>&1
  fi || { echo "callgrind-gate: $item failed:" >&2; cat "$out.log" >&2; exit 2; }
  sed -n 's/^totals: *//p' "$out"
}

declare -A median
for item in "${items[@]}"; do
  start=$SECONDS
  values=()
  for ((r = 1; r <= runs; r++)); do values+=("$(count "$item" "$tmp/$item.$r.out")"); done
  sorted=($(printf '%s\n' "${values[@]}" | sort -n))
  median[$item]=${sorted[$(((runs - 1) / 2))]}
  if [ "$runs" -gt 1 ]; then
    spread=$(awk -v lo="${sorted[0]}" -v hi="${sorted[$((runs - 1))]}" 'BEGIN { printf "%.4f", 100 * (hi - lo) / lo }')
    echo "  $item: ${values[*]} (spread ${spread}%, $((SECONDS - start)) s)"
  fi
done

{
  echo '{"counts": {'
  sep=""
  for item in "${items[@]}"; do printf '%s"%s": %s' "$sep" "$item" "${median[$item]}"; sep=$',\n'; done
  echo '},'
  printf '"environment": {"compiler": "%s", "valgrind": "%s", "build_type": "%s"}}\n' \
    "$("$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")" --version | head -1)" \
    "$(valgrind --version)" "$build_type"
} > "$tmp/counts.json"

rc=0
if [ -n "$update" ]; then
  "$gate" --compare bench/baseline/callgrind.json "$tmp/counts.json" --update
else
  "$gate" --compare bench/baseline/callgrind.json "$tmp/counts.json" || rc=$?
fi
if [ "$wall" = 1 ] && [ -z "$update" ]; then
  "$gate" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json \
    --benchmark_out="$tmp/wall.json" --benchmark_out_format=json > /dev/null 2>&1
  "$gate" --wall-report "$tmp/wall.json"
fi
exit $rc
