#!/usr/bin/env bash
# bench/gpu-check.sh [--backend cuda|cpu] OUTDIR [BUILD_DIR]: the one-GPU check of the CUDA backend, sized for one
# device lease (15 minutes of device time in all, one command of at most 10 minutes, 8 files back from $OUT).
#
# Steps (each under `timeout`; a step that fails or times out is recorded and the next one runs):
#   0. environment: GPU, driver, and the CUDA runtime, cuBLASLt, NCCL and cuDNN versions tp-run really loads (on a
#      lent machine they come from PyTorch's wheels, not from the versions we compiled against); `ldd tp-run`
#      finding a library missing stops the run at once (nothing after it could start)
#   1. the [cuda] tests (kernels against their CPU references; the backend's allocator, copies, GEMMs, verify, profile)
#   2. tp-run verify of tiny-llama and tiny-gpt at tp 1 in bf16, float8 none and tensorwise
#   3. tp-run profile of Llama3-8B and -70B blocks (2 layers, seq 8192, batch 1, sequence parallel) at the local
#      shapes of tp 1 and 8 on this one GPU (tp > 1: collectives not run, recorded as not measured; 2 and 4 were
#      left out when the memory-bound and 405B steps came in, to keep the check under 6 minutes)
#   4. tp-run bench gemm (bf16, fp8_e4m3) on those Programs' GEMM shapes; tp-run bench memory-bound (every
#      memory-bound kernel at Llama 3 8B's layer shapes, GB/s and % of a copy of the same run); profiles of Llama 3.1
#      405B's block at the local shapes of tp 8 in bf16 and float8 tensorwise, eager and compiled (2 layers, local
#      batch 2, full AC); tp-plan accuracy of every profile (the simulator's prediction of each, when tp-plan is built)
#   5. optional: PyTorch on the same GEMM, attention and memory-bound shapes and values, eager and compiled
#      (bench/torch_compare.py), and Inductor's kernels of a Llama block (bench/inductor_fusions.py), where torch
#      sees a GPU
# Throughout: nvidia-smi samples SM clock, power and temperature every 100 ms (gpu-clocks.csv; steps.csv says which
# step ran when).
# Results: everything in one archive, OUTDIR/gpu-check.tar.gz (logs, configs, Profile and bench JSON, compare.md),
# and the summary table OUTDIR/summary.md, printed last on stdout too, ending with issue 39's goals, each met, NOT
# MET or not measured (bench/gpu_goals.py: 0 failed [cuda] tests, every memory-bound kernel >= 70 % of the copy,
# float8 amax + casts <= 5 % of the 405B float8 step, compiled faster than eager where the simulator says so).
# Nothing else is left in OUTDIR: a lease hands back at most 8 files. The work folder is a temporary one
# (GPU_CHECK_KEEP=DIR keeps it there instead).
# GPU_CHECK_STEP_LIMIT=S replaces every step's time limit (a rerun that must fit the time left; the timeout test).
#
# --backend cpu is the rehearsal CI runs on every commit (tests/integration: "gpu-check rehearsal"): the same steps,
# the same config files and the same output layout on the CPU backend, with the Llama configs scaled down (dims,
# vocab and sequence; see make_configs) so that it takes seconds: the script's mechanics, paths, timeouts and archive
# are tested before a GPU is ever lent. Its per-step times are CPU times; the device column is this header's estimate.
#
# ---- Device budget plan (one H200, 15 min of device time per task, 10 min per command) ---------------------------
# Estimates (no GPU has run this yet; from FLOPs at ~600 TFLOP/s bf16, CUDA context + cuDNN plan builds ~2-4 s per
# process, weight initialisation ~1 ns per element on the host after issue 27's fix, and the CPU rehearsal's times
# for the fixed costs):
#   step                                         device estimate   limit    measured (H200, 2026-12-04)
#   0 environment, versions, ldd                           2 s       30 s      0 s
#   1 [cuda] tests (2 binaries)                           60 s      240 s     16 s
#   2 verify x 4 (tiny models)                            20 s   60 s each     6 s
#   3 profile x 4 (8B: 1.5 G params, 70B: 3.8 G)          60 s  150 s each    71 s (tp 1, 8 of the 133 s for 8)
#   4 bench gemm x 4                                      40 s   90 s each     4 s
#   4b bench memory-bound (8B layer, incl. data)          20 s      120 s      -
#   4c profile 405B tp 8 x 4 (bf16, float8;               60 s  150 s each    95 s for the 2 eager ones, when
#      eager, compiled)                                                           each drew all 10.6 G parameters
#                                                                                 on the host (now its 1.3 G)
#   4d tp-plan accuracy of the 8 profiles                  2 s       60 s      -
#   5 PyTorch comparison (optional)                       90 s      150 s     10 s (GEMM and attention only)
#   5b Inductor's kernels (optional)                      40 s       75 s      -
#   total                                               ~6 min  (+ ~1 min machine start)
# Steps 0-4 are the first (and normally only) command; step 5 is optional: each of its steps runs only when the
# run's budget (GPU_CHECK_BUDGET_S, 360 s) still holds its estimate, under a limit of what is left, so that the run
# ends within 6 minutes unless the steps before it overrun, and GPU_CHECK_SKIP_TORCH=1 leaves it out. The exact
# call a session makes (after `cmake --build build` with CUDA and `bench/gpu-bundle.sh --lean build`; the carried
# paths are 46 MiB, with the source tree 52 of the lease's 64 MiB):
#   run(command = "bench/gpu-check.sh --backend cuda \"$OUT\" build",
#       carry = ["build/tools/tp-run", "build/tools/tp-plan", "build/tests/kernels/cuda/tptune_kernels_cuda_tests",
#                "build/tests/runtime/cuda/tptune_runtime_cuda_tests", "build/gpu-bundle"],
#       timeout_s = 540)
# then give_back unless rerunning at once. Comes back: gpu-check.tar.gz and summary.md (2 of the 8 files).
# -------------------------------------------------------------------------------------------------------------------
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
backend=cuda
if [ "${1:-}" = "--backend" ]; then
  backend="${2:?--backend needs cuda or cpu}"
  shift 2
fi
case "$backend" in cuda | cpu) ;; *) echo "gpu-check: --backend: expected cuda or cpu, got '$backend'" >&2; exit 2 ;; esac
out="${1:?usage: bench/gpu-check.sh [--backend cuda|cpu] OUTDIR [BUILD_DIR]}"
build="$(cd "${2:-$here/build}" && pwd)" || { echo "gpu-check: no build folder ${2:-$here/build}" >&2; exit 2; }
mkdir -p "$out" && out="$(cd "$out" && pwd)"
if [ -n "${GPU_CHECK_KEEP:-}" ]; then
  work="$GPU_CHECK_KEEP/gpu-check"
  rm -rf "$work"
  mkdir -p "$work"
else
  work_parent="$(mktemp -d)"
  trap 'rm -rf "$work_parent"' EXIT
  work="$work_parent/gpu-check"
  mkdir -p "$work"
fi
tp_run="$build/tools/tp-run"
start=$SECONDS
failed=()
rows=()

# The shipped libraries (bench/gpu-bundle.sh) when this machine lacks them; one process per GPU without mpirun.
if [ -d "$build/gpu-bundle/lib" ]; then
  export LD_LIBRARY_PATH="$build/gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMPI_MCA_mca_base_component_path="$build/gpu-bundle/openmpi-plugins"
fi
# CUDA libraries from PyTorch's pip wheels (nvidia-cublas, nvidia-nccl-cu13, nvidia-cudnn-cu13, ...), for a lean
# bundle (bench/gpu-bundle.sh --lean) on a machine whose CUDA libraries come with PyTorch.
pip_cuda_libs="$(timeout 30 python3 -c 'import glob, os, nvidia; print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib")))))' 2>/dev/null || true)"
if [ -n "$pip_cuda_libs" ]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$pip_cuda_libs"
fi
export OMPI_MCA_ess_singleton_isolated=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# step NAME LIMIT_S ESTIMATE_S LOG COMMAND...: runs COMMAND under `timeout LIMIT_S` with its output in LOG (relative
# to the work folder), prints one line, records a row of the summary and any failure.
step() {
  local name="$1" limit="$2" estimate="$3" log="$4"
  shift 4
  local t0=$EPOCHREALTIME status result
  limit="${GPU_CHECK_STEP_LIMIT:-$limit}"
  echo "=== gpu-check: $name (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" >"$work/$log" 2>&1
  status=$?
  if [ $status -eq 0 ]; then
    result=ok
  elif [ $status -eq 124 ] || [ $status -eq 137 ]; then
    result="TIMEOUT after ${limit} s"
  else
    result="FAILED (exit $status)"
  fi
  local took
  took="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
  echo "$name,$t0,$EPOCHREALTIME" >>"$work/steps.csv"  # to read gpu-clocks.csv by step
  echo "    $result in ${took} s -> $log"
  if [ "$result" != ok ]; then
    tail -5 "$work/$log" | sed 's/^/    | /'
    failed+=("$name")
  fi
  rows+=("| $name | $result | $took | $estimate | $log |")
}

# 0. environment. The library versions: the paths ldd resolves for tp-run, loaded with ctypes and asked.
versions() {
  ldd "$tp_run" | awk '$3 ~ /^\// {print $1, $3}' | python3 -c '
import ctypes, sys
calls = {
  "libcudart": ("CUDA runtime", lambda l: (lambda v: (l.cudaRuntimeGetVersion(ctypes.byref(v)), v.value)[1])(ctypes.c_int())),
  "libcublasLt": ("cuBLASLt", lambda l: (setattr(l.cublasLtGetVersion, "restype", ctypes.c_size_t), l.cublasLtGetVersion())[1]),
  "libnccl": ("NCCL", lambda l: (lambda v: (l.ncclGetVersion(ctypes.byref(v)), v.value)[1])(ctypes.c_int())),
  "libcudnn.so": ("cuDNN", lambda l: (setattr(l.cudnnGetVersion, "restype", ctypes.c_size_t), l.cudnnGetVersion())[1]),
}
seen = set()
for line in sys.stdin:
  name, path = line.split()
  for prefix, (label, ask) in calls.items():
    if name.startswith(prefix) and label not in seen:
      seen.add(label)
      try:
        print(f"{label}: {ask(ctypes.CDLL(path))} ({path})")
      except Exception as e:
        print(f"{label}: cannot ask ({e}) ({path})")
for prefix, (label, ask) in calls.items():
  if label not in seen:
    print(f"{label}: not linked dynamically by tp-run")
'
}
environment() {
  echo "# gpu-check environment ($(date -u +%FT%TZ)), backend $backend"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
  else
    echo "nvidia-smi: not found"
  fi
  echo "build: $build (git $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  versions
}
echo "=== gpu-check: environment"
environment 2>&1 | tee "$work/environment.txt"
# SM clock, memory clock, power and temperature every 100 ms for the whole run (the clock a GEMM runs at depends on
# its power draw): gpu-clocks.csv, with steps.csv (name, start, end in epoch seconds) to attribute the samples.
echo "step,start_s,end_s" >"$work/steps.csv"
smi_pid=""
if [ "$backend" = cuda ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 \
    >"$work/gpu-clocks.csv" 2>&1 &
  smi_pid=$!
fi
missing="$(ldd "$tp_run" 2>&1 | grep "not found")"
if [ -n "$missing" ] || [ ! -x "$tp_run" ]; then
  echo "gpu-check: STOP: tp-run cannot start: ${missing:-$tp_run not built}" | tee -a "$work/environment.txt"
  failed+=("shared libraries")
  rows+=("| environment | STOPPED: a library is missing | 0 | 2 | environment.txt |")
  stop_early=1
else
  rows+=("| environment | ok | 0 | 2 | environment.txt |")
  stop_early=0
fi

# Configs: the tiny models in bf16 (their examples are fp32 for the tight CPU tolerance), the Llama blocks with 2
# layers. The CPU rehearsal scales the Llama blocks down (the same keys and files; head grouping kept).
make_configs() {
  local cfg="$work/configs"
  mkdir -p "$cfg"
  for m in tiny-llama tiny-gpt; do
    sed 's/^\(  dtype:\).*/\1 bf16/' "$here/examples/$m.yaml" >"$cfg/$m-bf16.yaml"
  done
  local extra='  n_layers: 2'
  if [ "$backend" = cpu ]; then
    # 32 query heads of 8 dims (8 kv heads), ffn 384, vocab 1024, 128 tokens: one step in well under a second.
    extra='  n_layers: 2\n  dim: 256\n  ffn_dim: 384\n  vocab_size: 1024'
  fi
  for m in 8b 70b; do
    sed 's/^\(  preset: llama3-'$m'\b.*\)$/\1\n'"$extra"'/' "$here/examples/llama3-$m-h100.yaml" >"$cfg/llama3-$m-2layers.yaml"
    [ "$backend" = cpu ] && sed -i 's/^\(  seq_len:\).*/\1 128/' "$cfg/llama3-$m-2layers.yaml"
  done
}

if [ "$stop_early" = 0 ]; then
  make_configs
  cfg="$work/configs"

  # 1. [cuda] tests: on the CPU rehearsal they skip (no device), which exercises the step. (A function, run by
  # `timeout` through bash -c.)
  # Both binaries run even when the first fails (the first H200 run's kernel failures hid the runtime tests).
  run_tests() {
    local any=0 bad=0
    for t in "$build/tests/kernels/cuda/tptune_kernels_cuda_tests" "$build/tests/runtime/cuda/tptune_runtime_cuda_tests"; do
      [ -x "$t" ] || continue
      any=1
      echo "## $t"
      "$t" --success "[cuda]" -r compact || bad=1
    done
    [ $any = 1 ] && return $bad
    echo "no [cuda] test binary in $build (configure with the CUDA toolkit)"
    [ "$backend" = cpu ]  # the rehearsal of a build without CUDA: nothing to run, not a failure
  }
  export -f run_tests
  export build backend
  step "[cuda] tests" 240 60 cuda-tests.txt bash -c run_tests
  if [ "$backend" = cuda ] && grep -q "no CUDA device visible" "$work/cuda-tests.txt"; then
    echo "gpu-check: the [cuda] tests saw no device: this is not a GPU run (see cuda-tests.txt)"
    failed+=("no device")
  fi

  # 2. verify at tp 1
  for m in tiny-llama tiny-gpt; do
    for f8 in none tensorwise; do
      step "verify $m bf16 float8 $f8" 60 5 "verify-$m-$f8.txt" \
        "$tp_run" verify "$cfg/$m-bf16.yaml" --preset sequence_parallel --float8 "$f8" --backend "$backend" \
        --timeout 50 --json "$work/verify-$m-$f8.json"
    done
  done

  # 3. profiles at the local shapes of tp 1, 2, 4, 8
  for m in 8b 70b; do
    estimate=$([ $m = 8b ] && echo 10 || echo 20)
    for tp in 1 8; do
      step "profile llama3-$m, local shapes of tp $tp" 150 "$estimate" "profile-$m-tp$tp.txt" \
        "$tp_run" profile "$cfg/llama3-$m-2layers.yaml" --preset sequence_parallel --tp "$tp" --local-shapes-of-tp "$tp" \
        --backend "$backend" --warmup 1 --iters 3 --quiet --timeout 120 --out "$work/profile-$m-tp$tp.json"
    done
  done

  # 4. GEMMs of those Programs through tp-run bench
  for m in 8b 70b; do
    for dt in bf16 fp8_e4m3; do
      step "bench gemm llama3-$m $dt" 90 10 "gemm-$m-$dt.txt" \
        "$tp_run" bench gemm --config "$cfg/llama3-$m-2layers.yaml" --preset sequence_parallel --tp 8 --no-grid \
        --dtype "$dt" --backend "$backend" --warmup 3 --iters 10 --json "$work/gemm-$m-$dt.json"
    done
  done

  # 4b. every memory-bound kernel at Llama 3 8B's layer shapes (seq 8192, tp 1), in GB/s and % of a copy of the same
  # run (the CPU rehearsal: a small layer)
  if [ "$backend" = cuda ]; then
    mb_shape=()
  else
    mb_shape=(--rows 256 --dim 256 --ffn-dim 512 --vocab 2048 --heads 4 --head-dim 64)
  fi
  step "bench memory-bound llama3-8b bf16" 120 20 memory-bound-8b.txt \
    "$tp_run" bench memory-bound "${mb_shape[@]}" --backend "$backend" --warmup 3 --iters 10 \
    --json "$work/memory-bound-8b.json"

  # 4c. Llama 3.1 405B's block at the local shapes of tp 8 (2 layers, local batch 2, full AC, loss parallel: the
  # shape of torchtitan's published 405B runs), bf16 and float8 tensorwise: what float8's amax and casts cost.
  # The CPU rehearsal runs the 8B block's scaled-down config instead (the same options).
  if [ "$backend" = cuda ]; then
    sed 's/^\(  preset: llama3-405b\b.*\)$/\1\n  n_layers: 2/; s/^\(  local_batch_size:\).*/\1 2/; s/^\(  activation_checkpointing:\).*/\1 full/; s/^\(  nodes:\).*/\1 16/' \
      "$here/examples/llama3-405b-h100.yaml" >"$cfg/llama3-405b-2layers.yaml"
    big="$cfg/llama3-405b-2layers.yaml"
  else
    big="$cfg/llama3-8b-2layers.yaml"
  fi
  # Eager (profile-405b-tp8-F.json) and compiled (profile-405b-tp8-F-compile.json: Inductor's block fusions, the
  # float8 amax folded into its producer), so that the goals below compare the modes on the same shapes and data.
  for f8 in none tensorwise; do
    for mode in eager compile; do
      suffix=$([ $mode = compile ] && echo -compile || true)
      step "profile llama3-405b, local shapes of tp 8, float8 $f8, $mode" 150 30 "profile-405b-tp8-$f8$suffix.txt" \
        "$tp_run" profile "$big" --preset sequence_parallel --tp 8 --local-shapes-of-tp 8 --loss-parallel \
        --float8 "$f8" "--$([ $mode = compile ] && echo compile || echo no-compile)" --backend "$backend" \
        --warmup 1 --iters 3 --quiet --timeout 120 --out "$work/profile-405b-tp8-$f8$suffix.json"
    done
  done

  # 4d. the simulator's prediction of every profile above (tp-plan accuracy: compute-only steps, per op class and
  # kind), for the goals' "compiled faster than eager where the simulator says so"
  profiles=("$work"/profile-{8b,70b}-tp{1,8}.json "$work"/profile-405b-tp8-{none,tensorwise}{,-compile}.json)
  if [ -x "$build/tools/tp-plan" ]; then
    step "tp-plan accuracy of the profiles" 60 2 accuracy.txt \
      "$build/tools/tp-plan" accuracy "${profiles[@]}" --json "$work/accuracy.json"
  else
    echo "no $build/tools/tp-plan: carry it to have the simulator's predictions in the goals" >"$work/accuracy.txt"
    rows+=("| tp-plan accuracy of the profiles | skipped | 0 | 2 | accuracy.txt |")
  fi

  # 5. optional: PyTorch on the same shapes, each step only when the run's budget (GPU_CHECK_BUDGET_S, 360 s: the
  # issue's "under 6 minutes") still holds its estimate, under a limit of what is left
  budget=${GPU_CHECK_BUDGET_S:-360}
  left() { echo $((budget - (SECONDS - start))); }
  if [ "$(left)" -lt 100 ]; then
    echo "PyTorch comparison skipped: $(left) s left of the ${budget} s budget (GPU_CHECK_BUDGET_S)" \
      >"$work/compare.txt"
    rows+=("| PyTorch comparison | skipped (time) | 0 | 90 | compare.txt |")
  elif [ "$backend" = cuda ] && [ -z "${GPU_CHECK_SKIP_TORCH:-}" ] &&
    timeout 60 python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    export TORCH_COMPARE_COMPILE_BUDGET_S=60
    step "PyTorch comparison" "$(($(left) < 150 ? $(left) : 150))" 90 compare.txt \
      python3 "$here/bench/torch_compare.py" "$work"
    # what torch.compile makes of a Llama block (bench/inductor_fusions.py): the fusions tp-run's --compile is to match
    if [ "$(left)" -ge 40 ]; then
      step "Inductor's kernels of a Llama block" "$(($(left) < 75 ? $(left) : 75))" 40 inductor-fusions.txt \
        python3 "$here/bench/inductor_fusions.py" --out "$work/inductor" --seq 2048 --float8
    else
      echo "skipped: $(left) s left of the ${budget} s budget (GPU_CHECK_BUDGET_S)" >"$work/inductor-fusions.txt"
      rows+=("| Inductor's kernels of a Llama block | skipped (time) | 0 | 40 | inductor-fusions.txt |")
    fi
  else
    echo "PyTorch comparison skipped (backend $backend, GPU_CHECK_SKIP_TORCH='${GPU_CHECK_SKIP_TORCH:-}', or no CUDA torch)" >"$work/compare.txt"
    rows+=("| PyTorch comparison | skipped | 0 | 60 | compare.txt |")
  fi
fi

[ -n "$smi_pid" ] && kill "$smi_pid" 2>/dev/null

# Issue 39's goals, read from what the steps wrote (bench/gpu_goals.py): a table in the summary, each goal met, not
# met or not measured. A goal not met is a finding of the run, not a failure of the check.
python3 "$here/bench/gpu_goals.py" "$work" >"$work/goals.md" 2>&1 ||
  echo "gpu_goals.py could not read the run (exit $?): see goals.md" >>"$work/goals.md"

# Summary and archive: the two files that come back.
{
  echo "# gpu-check summary: backend $backend, $(date -u +%FT%TZ), $((SECONDS - start)) s in all"
  echo
  echo "| step | result | seconds | device estimate (s) | log |"
  echo "| --- | --- | ---: | ---: | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  cat "$work/goals.md"
  echo
  if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: $(IFS=';'; echo "${failed[*]}")"
  else
    echo "PASS"
  fi
} >"$work/summary.md"
cp "$work/summary.md" "$out/summary.md"
tar -C "$(dirname "$work")" -czf "$out/gpu-check.tar.gz" "$(basename "$work")" ||
  { echo "gpu-check: could not write $out/gpu-check.tar.gz" >&2; failed+=("archive"); }
echo "=== gpu-check: results in $out/gpu-check.tar.gz ($(du -k "$out/gpu-check.tar.gz" 2>/dev/null | cut -f1) KiB) and $out/summary.md"
cat "$out/summary.md"
[ ${#failed[@]} -eq 0 ]
