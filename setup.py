"""Builds the pstrain-ps distribution from this checkout (pyproject.toml
holds its metadata):

    python3 -m pip install --no-build-isolation .     # into the active environment
    python3 -m pip wheel --no-build-isolation .       # a wheel, for this kind of machine
    python3 setup.py sdist      # the sources (MANIFEST.in); pip builds its wheel where it installs

The binaries come from the CMake build in build/ (or $PSTRAIN_BUILD_DIR):
an existing one is reused, brought up to date by an incremental
`cmake --build` of the targets the package holds (seconds after
tools/setup.sh); without one, it is configured first (Release). Installed:

    pstrain/                 the Python package (pstrain.torch, pstrain.runner)
    pstrain/libpstrain.so    the C API's library (pstrain/_lib.py looks here first)
    pstrain/_bin/            pstrain, ps_server, worker (and libpstrain_cuda.so when built)
    bin/pstrain              a command that runs pstrain/_bin/pstrain

The binaries link Debian's shared libraries (abseil, protobuf, ZeroMQ,
glog, ...): the wheel is for machines with those packages, not a
manylinux wheel. The version is CMakeLists.txt's project(VERSION).
"""

import os
import re
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
BINARIES = ("pstrain", "ps_server", "worker")
TARGETS = ("pstrain", "ps_server", "worker", "pstrain_c")


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        found = re.search(r"project\(pstrain VERSION ([0-9.]+)", f.read())
    if found is None:
        raise RuntimeError("CMakeLists.txt: no project(pstrain VERSION x.y.z)")
    return found.group(1)


def build_dir():
    return os.path.abspath(os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(ROOT, "build"))


def has_cuda_target(build):
    """Whether the build configured the CUDA plugin (the toolkit was found)."""
    return os.path.isdir(os.path.join(build, "models", "cuda", "CMakeFiles", "pstrain_cuda.dir"))


def configure_args():
    """A checkout's configuration, or an sdist's (no tests/, benchmarks/:
    MANIFEST.in leaves them out)."""
    args = ["-DCMAKE_BUILD_TYPE=Release"]
    if not os.path.isdir(os.path.join(ROOT, "tests")):
        args += ["-DPSTRAIN_BUILD_TESTS=OFF", "-DPSTRAIN_BUILD_BENCHMARKS=OFF"]
    return args


def cmake_build(build):
    """The package's targets, up to date in `build`."""
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build] + configure_args())
    targets = TARGETS + (("pstrain_cuda",) if has_cuda_target(build) else ())
    jobs = os.environ.get("PSTRAIN_BUILD_JOBS") or str(os.cpu_count() or 1)
    subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target"] + list(targets))


class BuildPy(build_py):
    """The Python package, then the library and the binaries into it."""

    def run(self):
        # Staged afresh: nothing of an earlier build (a module since
        # removed, a CUDA plugin no longer built) reaches the wheel.
        shutil.rmtree(os.path.join(self.build_lib, "pstrain"), ignore_errors=True)
        super().run()
        build = build_dir()
        cmake_build(build)
        package = os.path.join(self.build_lib, "pstrain")
        self.copy_file(os.path.join(build, "lib", "libpstrain.so"), package)
        bin_dir = os.path.join(package, "_bin")
        self.mkpath(bin_dir)
        names = BINARIES + (("libpstrain_cuda.so",) if has_cuda_target(build) else ())
        for name in names:
            self.copy_file(os.path.join(build, "bin", name), bin_dir)


class BinaryDistribution(Distribution):
    """Files for one platform: installed as platform files (platlib), in
    a wheel of a platform."""

    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    """Binaries for this platform, but no Python extension: any Python 3
    loads the library with ctypes (py3-none-linux_x86_64)."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


# setuptools' own build files go under the CMake build, not into its lib/.
_STAGING = os.path.join(build_dir(), "python-dist")

if __name__ == "__main__":  # as setuptools runs it; tests import configure_args
    setup(
        version=version(),
        packages=["pstrain", "pstrain.torch"],
        package_dir={"": "python"},
        scripts=["python/scripts/pstrain"],
        distclass=BinaryDistribution,
        cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
        options={"build": {"build_base": _STAGING},
                 "egg_info": {"egg_base": _STAGING}},
        zip_safe=False,
    )
