"""pstrain as a user installs it: a fresh venv that sees Debian's torch
(--system-site-packages), this checkout pip-installed into it offline
(--no-index, no build isolation, the build tree reused), then, from
another directory with nothing on PYTHONPATH, `pstrain launch` of
examples/pytorch/mnist.py and `import pstrain.torch`. The job's python3
is the system's, not the venv's: it finds pstrain only through the
PYTHONPATH the installed launcher gives it (the package's parent)."""

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import unittest
import zipfile

import pstrain_testing as t

BUILD_DIR = os.path.abspath(os.path.join(t.BIN_DIR, os.pardir))
EXAMPLE_DIR = os.path.join(t.SOURCE_DIR, "examples", "pytorch")


def clean_env(**extra):
    """A user's environment: no PYTHONPATH, no PSTRAIN_*, no pip settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith(("PSTRAIN_", "PIP_"))}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    env.update(extra)
    return env


def check_run(test, args, cwd, env, timeout_s=300):
    done = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
    test.assertEqual(done.returncode, 0, "%s:\n%s" % (" ".join(args), done.stdout))
    return done.stdout


class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="pstrain_install_")
        cls.dir = cls._tmp.name
        cls.venv = os.path.join(cls.dir, "venv")
        cls.env = clean_env(PSTRAIN_BUILD_DIR=BUILD_DIR)
        subprocess.run([t.PYTHON, "-m", "venv", "--system-site-packages", cls.venv], check=True)
        cls.python = os.path.join(cls.venv, "bin", "python")

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def pip(self, *args):
        return check_run(self, [self.python, "-m", "pip"] + list(args) + [
            "--no-index", "--no-build-isolation", "--no-cache-dir", t.SOURCE_DIR],
                         cwd=self.dir, env=self.env)

    def test_1_a_wheel_holds_the_package_the_library_and_the_binaries(self):
        wheels = os.path.join(self.dir, "wheels")
        self.pip("wheel", "--no-deps", "-w", wheels)
        [name] = os.listdir(wheels)
        self.assertRegex(name, r"^pstrain_ps-\d+\.\d+\.\d+-py3-none-linux_\w+\.whl$")
        with open(os.path.join(t.SOURCE_DIR, "CMakeLists.txt")) as f:
            version = re.search(r"project\(pstrain VERSION ([0-9.]+)", f.read()).group(1)
        self.assertIn("-%s-" % version, name)
        with zipfile.ZipFile(os.path.join(wheels, name)) as wheel:
            modes = {i.filename: i.external_attr >> 16 for i in wheel.infolist()}
        for path in ("pstrain/__init__.py", "pstrain/torch/__init__.py",
                     "pstrain/torch/_optimizer.py", "pstrain/runner.py", "pstrain/_run_worker.py",
                     "pstrain/libpstrain.so"):
            self.assertIn(path, modes)
        for binary in ("pstrain", "ps_server", "worker"):
            self.assertTrue(modes["pstrain/_bin/" + binary] & 0o111, binary + " is executable")
        self.assertIn("pstrain_ps-%s.data/scripts/pstrain" % version, modes)

    def test_2_installed_pstrain_launches_a_script_from_anywhere(self):
        self.pip("install")
        site = subprocess.run(
            [self.python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
            stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
        for name in ("pstrain/libpstrain.so", "pstrain/_bin/pstrain", "pstrain/_bin/ps_server",
                     "pstrain/_bin/worker"):
            self.assertTrue(os.path.isfile(os.path.join(site, name)), name)
        work = os.path.join(self.dir, "work")
        os.makedirs(work)
        for name in ("mnist.py", "idx_data.py", "mnist_cnn.py"):
            shutil.copy(os.path.join(EXAMPLE_DIR, name), work)
        with open(os.path.join(work, "spec.json"), "w") as f:
            json.dump({"cluster": {"worker": ["localhost:2220", "localhost:2221"],
                                   "ps": ["localhost:2240"]}}, f)
        # The venv's command, but the system's python3 for the job: it
        # imports pstrain through the launcher's PYTHONPATH alone.
        env = clean_env(PATH="/usr/bin:/bin")
        out = check_run(self, [os.path.join(self.venv, "bin", "pstrain"), "launch",
                               "--cluster_spec=spec.json", "--free_ports", "--mode=sync",
                               "--max_steps=20", "--run_dir=run", "--echo=progress", "--",
                               "python3", "mnist.py", "--data_dir=" + t.DATA_DIR],
                        cwd=work, env=env)
        self.assertIn("== pstrain summary: %s/run ==" % os.path.realpath(work), out)
        self.assertIn("after 20 steps per worker", out)
        with open(os.path.join(work, "run", "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual((summary["num_workers"], summary["num_ps"]), (2, 1))
        self.assertGreater(summary["final_test_accuracy"], 0.1)
        # And Python itself, from elsewhere, without PYTHONPATH.
        where = check_run(self, [self.python, "-c",
                                 "import pstrain.torch, pstrain._lib as l, pstrain.runner as r; "
                                 "print(l.LIBRARY_PATH); print(r.find_binary())"],
                          cwd=work, env=clean_env())
        library, binary = where.split()
        self.assertEqual(library, os.path.join(site, "pstrain", "libpstrain.so"))
        self.assertEqual(binary, os.path.join(site, "pstrain", "_bin", "pstrain"))

    def test_3_an_sdist_holds_the_sources_its_build_configures_from(self):
        # pip builds an sdist's wheel where it installs it: a configure of
        # the unpacked sources (as setup.py's, tests and benchmarks left
        # out) fails on any source file a CMakeLists.txt names and
        # MANIFEST.in left out. The whole build is the checkout's.
        dist = os.path.join(self.dir, "sdist")
        # A staging directory of its own: setuptools adds the files an
        # earlier sdist's SOURCES.txt listed to what MANIFEST.in says.
        staging = os.path.join(self.dir, "sdist_staging", "python-dist")
        os.makedirs(staging)
        check_run(self, [t.PYTHON, "setup.py", "-q", "sdist", "-d", dist], cwd=t.SOURCE_DIR,
                  env=clean_env(PSTRAIN_BUILD_DIR=os.path.dirname(staging)))
        [name] = os.listdir(dist)
        with open(os.path.join(t.SOURCE_DIR, "CMakeLists.txt")) as f:
            version = re.search(r"project\(pstrain VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(name, "pstrain-ps-%s.tar.gz" % version)
        with tarfile.open(os.path.join(dist, name)) as tar:
            tar.extractall(dist)
        root = os.path.join(dist, "pstrain-ps-" + version)
        for path in ("CMakeLists.txt", "setup.py", "pyproject.toml", "capi/c_api.cc",
                     "include/pstrain/c_api.h", "proto/pstrain.proto",
                     "python/pstrain/torch/_optimizer.py", "python/scripts/pstrain",
                     "examples/pytorch/mnist.py", "cluster_specs/local_2ps_2w.json"):
            self.assertTrue(os.path.isfile(os.path.join(root, path)), path)
        self.assertFalse(os.path.exists(os.path.join(root, "tests")))
        args = subprocess.run([t.PYTHON, "-c", "import setup; print(' '.join(setup.configure_args()))"],
                              cwd=root, env=self.env, stdout=subprocess.PIPE, text=True,
                              check=True).stdout.split()
        self.assertIn("-DPSTRAIN_BUILD_TESTS=OFF", args)
        build = os.path.join(self.dir, "sdist_build")
        check_run(self, ["cmake", "-S", root, "-B", build, "-DPSTRAIN_CUDA=OFF"] + args,
                  cwd=self.dir, env=self.env)
        self.assertTrue(os.path.isfile(os.path.join(build, "Makefile"))
                        or os.path.isfile(os.path.join(build, "build.ninja")))


if __name__ == "__main__":
    unittest.main()
