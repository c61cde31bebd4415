#!/usr/bin/env bash
# Packs a CUDA-enabled build for a GPU machine that has the NVIDIA driver,
# the CUDA runtime, cuBLAS and cuDNN but none of our -dev packages (the lent
# H100/H200 machines: no package registry there). Writes DEST (default
# .gpu/, ignored by git):
#   DEST/bin    the binaries run_gpu_checks.sh, wire_ceiling.sh and
#               pslite_compare.sh run, and libpstrain_cuda.so (ps-lite's
#               pslite_pushpull and pslite_rows where pslite_compare.sh built
#               them here first); from a build without the CUDA backend,
#               the CPU binaries alone (enough for pstrain.torch, whose
#               tensors are PyTorch's, and for CPU workers)
#   DEST/lib    every shared library they need from /lib, except glibc's,
#               libstdc++'s and libgcc's (the GPU machine's own are newer),
#               and libpstrain.so (the C API)
#   DEST/python the Python package (pstrain.torch), as a launched script
#               finds it beside the binaries
#   DEST/mnist  MNIST's four .gz files (from MNIST_MIRROR, else data/mnist)
# Then, on the GPU machine:  PSTRAIN_PREBUILT=DEST benchmarks/run_gpu_checks.sh
#                            PSTRAIN_PREBUILT=DEST benchmarks/gpu_torch_checks.sh OUT
#                            PSTRAIN_PREBUILT=DEST benchmarks/wire_ceiling.sh
#                            PSTRAIN_PREBUILT=DEST benchmarks/pslite_compare.sh
#
# Usage: benchmarks/gpu_pack.sh [DEST]      BUILD_DIR: default build/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
dest=${1:-$root/.gpu}
bins=(pstrain ps_server worker model_bench wire_bench)
[[ -f $build/CMakeCache.txt ]] || { echo "gpu_pack: error: no build in $build (tools/setup.sh)" >&2; exit 1; }
if grep -q '^PSTRAIN_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  bins+=(libpstrain_cuda.so cuda_status_test cuda_device_selection_test cuda_algorithm_search_test
         cuda_layers_test cuda_model_test cuda_model_bench)
else
  # Enough for pstrain.torch (the tensors are PyTorch's) and for CPU
  # workers; run_gpu_checks.sh needs the CUDA backend.
  echo "gpu_pack: $build has no CUDA backend: packing a CPU build" >&2
fi
rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib" "$dest/mnist"
for b in "${bins[@]}"; do cp "$build/bin/$b" "$dest/bin/"; done
for p in pslite_pushpull pslite_rows; do
  if [[ -x $build/pslite/$p ]]; then
    cp "$build/pslite/$p" "$dest/bin/"
    bins+=("../pslite/$p")
  else
    echo "gpu_pack: no $build/pslite/$p (run benchmarks/pslite_compare.sh here first): not packed" >&2
  fi
done
# Shared libraries: what ldd resolves under /lib or /usr/lib, less the C and
# C++ runtimes and anything CUDA's (the GPU machine brings those).
cp "$build/lib/libpstrain.so" "$dest/lib/"
cp -r "$root/python" "$dest/python"
for b in "${bins[@]}" ../lib/libpstrain.so; do ldd "$build/bin/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -E '^/(usr/)?lib/' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$dest/lib/"; done
mnist=${MNIST_MIRROR:-}
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [[ -n $mnist && -f $mnist/$f.gz ]]; then cp "$mnist/$f.gz" "$dest/mnist/"
  else gzip -c "$root/data/mnist/$f" >"$dest/mnist/$f.gz"; fi
done
du -sh "$dest"/*
