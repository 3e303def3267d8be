#!/usr/bin/env bash
# bench/gpu-check.sh OUTDIR [BUILD_DIR]: the one-GPU check of the CUDA backend, meant to take under 8 minutes on
# one H200. It runs, from a build made elsewhere and copied over (bench/gpu-bundle.sh ships the shared libraries
# the binaries need; see there for what the target must have):
#   1. the [cuda] tests (kernels against their CPU references; the backend's allocator, transfers, cuBLASLt
#      GEMMs, verify and profile)                                          -> OUTDIR/cuda-tests.txt
#   2. tp-run verify of the tiny configs at tp 1 in bf16, with and without float8 tensorwise
#                                                                          -> OUTDIR/verify-*.json
#   3. tp-run profile of Llama3-8B and -70B blocks (2 layers, seq 8192, batch 1, sequence parallel) at the local
#      shapes of tp 1, 2, 4 and 8 on this one GPU (tp > 1: collectives not run, recorded as not measured)
#                                                                          -> OUTDIR/profile-{8b,70b}-tp{N}.json
#   4. tp-run bench gemm --backend cuda (bf16, fp8_e4m3) on the GEMM shapes of those Programs, and a table of
#      GEMM and attention TFLOP/s side by side with PyTorch (torch.matmul, torch._scaled_mm,
#      F.scaled_dot_product_attention) on the same shapes and dtypes    -> OUTDIR/gemm-*.json, OUTDIR/compare.md
# Needs: an NVIDIA GPU, python3 with torch (CUDA) for step 4 (skipped with a line without it). Exits non-zero if a
# step fails; every step's log is under OUTDIR.
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: bench/gpu-check.sh OUTDIR [BUILD_DIR]}"
build="$(cd "${2:-$here/build}" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
tp_run="$build/tools/tp-run"
start=$SECONDS
failed=()

# The shipped libraries (bench/gpu-bundle.sh) when this machine lacks them; one process per GPU without mpirun.
if [ -d "$build/gpu-bundle/lib" ]; then
  export LD_LIBRARY_PATH="$build/gpu-bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OMPI_MCA_mca_base_component_path="$build/gpu-bundle/openmpi-plugins"
fi
# CUDA libraries from PyTorch's pip wheels (nvidia-cublas, nvidia-nccl-cu13, nvidia-cudnn-cu13, ...), for a lean
# bundle (bench/gpu-bundle.sh --lean) on a machine whose CUDA libraries come with PyTorch.
pip_cuda_libs="$(python3 -c 'import glob, os, nvidia; print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib")))))' 2>/dev/null || true)"
if [ -n "$pip_cuda_libs" ]; then
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$pip_cuda_libs"
fi
export OMPI_MCA_ess_singleton_isolated=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step() {  # step NAME LOG COMMAND...: runs it, logs it, records a failure
  local name="$1" log="$2"; shift 2
  local t0=$SECONDS
  echo "=== gpu-check: $name"
  if "$@" >"$log" 2>&1; then
    echo "    ok ($((SECONDS - t0)) s) -> $log"
  else
    echo "    FAILED ($((SECONDS - t0)) s), see $log"; tail -5 "$log" | sed 's/^/    | /'
    failed+=("$name")
  fi
}

{
  echo "# gpu-check environment ($(date -u +%FT%TZ))"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
  echo "build: $build (git $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  ldd "$tp_run" | grep "not found" || echo "ldd: every shared library of tp-run found"
} | tee "$out/environment.txt"

# 1. [cuda] tests
tests=()
for t in "$build/tests/kernels/cuda/tptune_kernels_cuda_tests" "$build/tests/runtime/cuda/tptune_runtime_cuda_tests"; do
  [ -x "$t" ] && tests+=("$t")
done
run_tests() { for t in "${tests[@]}"; do echo "## $t"; "$t" --success "[cuda]" -r compact || return 1; done; }
step "[cuda] tests" "$out/cuda-tests.txt" run_tests
if grep -q "no CUDA device visible" "$out/cuda-tests.txt"; then
  echo "gpu-check: the [cuda] tests saw no device: this is not a GPU run (see $out/cuda-tests.txt)"
  failed+=("no device")
fi

# Configs: the tiny models in bf16 (their examples are fp32 for the tight CPU tolerance), the Llama blocks.
cfg="$out/configs"
mkdir -p "$cfg"
for m in tiny-llama tiny-gpt; do
  sed 's/^\(  dtype:\).*/\1 bf16/' "$here/examples/$m.yaml" >"$cfg/$m-bf16.yaml"
done
for m in 8b 70b; do
  sed 's/^\(  preset: llama3-'$m'\b.*\)$/\1\n  n_layers: 2/' "$here/examples/llama3-$m-h100.yaml" >"$cfg/llama3-$m-2layers.yaml"
done

# 2. verify at tp 1
for m in tiny-llama tiny-gpt; do
  for f8 in none tensorwise; do
    step "verify $m bf16 float8 $f8" "$out/verify-$m-$f8.txt" \
      "$tp_run" verify "$cfg/$m-bf16.yaml" --preset sequence_parallel --float8 "$f8" --backend cuda \
      --json "$out/verify-$m-$f8.json"
  done
done

# 3. profiles at the local shapes of tp 1, 2, 4, 8
for m in 8b 70b; do
  for tp in 1 2 4 8; do
    step "profile llama3-$m 2 layers, local shapes of tp $tp" "$out/profile-$m-tp$tp.txt" \
      "$tp_run" profile "$cfg/llama3-$m-2layers.yaml" --preset sequence_parallel --tp "$tp" --local-shapes-of-tp "$tp" \
      --backend cuda --warmup 1 --iters 3 --quiet --out "$out/profile-$m-tp$tp.json"
  done
done

# 4. GEMMs of those Programs through tp-run bench, then PyTorch on the same shapes
for m in 8b 70b; do
  for dt in bf16 fp8_e4m3; do
    step "bench gemm llama3-$m $dt" "$out/gemm-$m-$dt.txt" \
      "$tp_run" bench gemm --config "$cfg/llama3-$m-2layers.yaml" --preset sequence_parallel --tp 8 --no-grid \
      --dtype "$dt" --backend cuda --warmup 3 --iters 10 --json "$out/gemm-$m-$dt.json"
  done
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  step "PyTorch comparison" "$out/compare.txt" python3 "$here/bench/torch_compare.py" "$out"
else
  echo "=== gpu-check: PyTorch comparison skipped: python3 with CUDA torch not found" | tee "$out/compare.txt"
fi

echo "=== gpu-check: $((SECONDS - start)) s in all; results in $out"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'gpu-check: FAILED: %s\n' "${failed[@]}"
  exit 1
fi
echo "gpu-check: PASS"
