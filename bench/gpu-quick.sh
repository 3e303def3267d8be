#!/usr/bin/env bash
# Temporary (not committed): a quick check of the kernels on the device. OUT BUILD
set -uo pipefail
out="$1"; build="$2"; here="$(pwd)"; w=/tmp/quick; mkdir -p $w
export LD_LIBRARY_PATH="$build/gpu-bundle/lib"
export OMPI_MCA_mca_base_component_path="$build/gpu-bundle/openmpi-plugins"
pip_cuda_libs="$(timeout 30 python3 -c 'import glob, os, nvidia; print(":".join(sorted(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib")))))' 2>/dev/null || true)"
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$pip_cuda_libs"
export OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$SECONDS
timeout 200 "$build/tests/kernels/cuda/tptune_kernels_cuda_tests" > $w/kernels-tests.txt 2>&1; echo "kernels tests rc=$? $((SECONDS-t0)) s"
timeout 120 "$build/tests/runtime/cuda/tptune_runtime_cuda_tests" > $w/runtime-tests.txt 2>&1; echo "runtime tests rc=$? $((SECONDS-t0)) s"
tail -4 $w/kernels-tests.txt; grep -B3 -A25 "FAILED" $w/runtime-tests.txt | head -80; tail -4 $w/runtime-tests.txt
timeout 120 "$build/tools/tp-run" bench memory-bound --backend cuda --json $w/memory-bound-8b.json > $w/memory-bound-8b.txt 2>&1; echo "bench memory-bound rc=$? $((SECONDS-t0)) s"
cat $w/memory-bound-8b.txt
cp "$here/bench/gpu-quick-configs/llama3-8b-2layers.yaml" $w/
timeout 150 "$build/tools/tp-run" profile $w/llama3-8b-2layers.yaml --preset sequence_parallel --tp 1 --local-shapes-of-tp 1 \
    --backend cuda --warmup 1 --iters 3 --quiet --timeout 120 --out $w/profile-8b-tp1.json > $w/profile-8b-tp1.txt 2>&1
echo "profile 8b rc=$? $((SECONDS-t0)) s"
python3 "$here/bench/gpu-quick-opbw.py" $w/profile-8b-tp1.json
tar -C /tmp -czf "$out/quick.tar.gz" quick
