#!/usr/bin/env bash
# bench/gpu-bundle.sh [BUILD_DIR]: make a build copyable to a GPU machine that has none of our Debian packages.
#
# Copies into BUILD_DIR/gpu-bundle/ the shared libraries that tp-run, tp-plan and the [cuda] test binaries need and a
# plain GPU machine may lack (`ldd`, minus the C runtime: libc, libm, libstdc++, libgcc_s, ld-linux, libpthread, libdl,
# librt), every cuDNN 9 sub-library (cuDNN dlopens them, so ldd does not list them) and Open MPI's plugin directory
# (MPI_Init loads its components from there). bench/gpu-check.sh uses the bundle when it finds it:
#   LD_LIBRARY_PATH=<bundle>/lib, OMPI_MCA_mca_base_component_path=<bundle>/openmpi-plugins,
#   OMPI_MCA_ess_singleton_isolated=1 (one process without mpirun: no orted to start).
# `--lean` leaves out the CUDA toolkit's own libraries (cudart, cuBLAS/cuBLASLt, NCCL, cuDNN, nvrtc: ~1.2 GB) for a
# target that has them already, e.g. PyTorch's pip wheels (nvidia-cublas, nvidia-nccl-cu13, nvidia-cudnn-cu13,
# nvidia-cuda-nvrtc, nvidia-cuda-runtime): gpu-check.sh puts their lib folders on LD_LIBRARY_PATH. The lean bundle
# is yaml-cpp, fmt, Open MPI and its plugins, a few MiB: small enough for a device lease's 64 MiB working tree.
# Then copy the whole source tree with its build folder (e.g. rsync -a tptune/ gpu:tptune/) and run
# `bench/gpu-check.sh OUTDIR` there. The target needs an NVIDIA driver for the CUDA this was built with (CUDA 13.0
# here: driver >= 580) and a glibc / libstdc++ at least as new as this machine's (Debian 12: glibc 2.36,
# GLIBCXX_3.4.30); `ldd` on the target says what is still missing. The CUDA libraries are large (cuBLASLt ~0.5 GB,
# NCCL ~0.2 GB, cuDNN ~0.5 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
lean=0
if [ "${1:-}" = "--lean" ]; then lean=1; shift; fi
build="${1:-build}"
cuda_root="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")"
out="$build/gpu-bundle"
bins=("$build/tools/tp-run")
[ -x "$build/tools/tp-plan" ] && bins+=("$build/tools/tp-plan")  # the goals' predictions (gpu-check step 4d)
for t in "$build/tests/runtime/cuda/tptune_runtime_cuda_tests" "$build/tests/kernels/cuda/tptune_kernels_cuda_tests"; do
  [ -x "$t" ] && bins+=("$t")
done
[ -x "${bins[0]}" ] || { echo "gpu-bundle: ${bins[0]} not built (cmake --build $build)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/lib" "$out/openmpi-plugins"
system='^(linux-vdso|libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so)'
for b in "${bins[@]}"; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $system ]] && continue
    if [ $lean = 1 ] && [[ "$(readlink -f "$path")" == "$cuda_root"/* ]]; then continue; fi
    cp -L -n "$path" "$out/lib/$name"
  done
done
cudnn="$(ldd "${bins[0]}" | awk '$1 ~ /^libcudnn\.so/ {print $3}')"
if [ $lean = 0 ] && [ -n "$cudnn" ]; then
  cp -L -n "$(dirname "$cudnn")"/libcudnn_*.so.9 "$out/lib/" 2>/dev/null || true
  # cuDNN's runtime-compiled engines (the fused attention ones among them) dlopen nvrtc; ldd does not list it.
  cp -L -n "$(dirname "$cudnn")"/libnvrtc*.so.* "$cuda_root"/lib64/libnvrtc*.so.* "$out/lib/" 2>/dev/null || true
fi
# Open MPI's components (mca_*.so): its pkglibdir.
plugins="$(ompi_info --path pkglibdir 2>/dev/null | sed -n 's/.*Pkglibdir: *//p')"
if [ ! -f "$plugins/mca_pml_ob1.so" ]; then
  plugins="$(dirname "$(find /usr/lib /usr/lib64 /usr/local/lib /opt -name mca_pml_ob1.so 2>/dev/null | head -1)")"
fi
if [ -f "$plugins/mca_pml_ob1.so" ]; then
  cp -L -r "$plugins"/. "$out/openmpi-plugins/"
else
  echo "gpu-bundle: warning: Open MPI's plugin directory (mca_pml_ob1.so) not found" >&2
fi
echo "gpu-bundle: $(ls "$out/lib" | wc -l) libraries ($(du -sh "$out/lib" | cut -f1)), Open MPI plugins from $plugins -> $out"
