"""What the Python tests share: where the build and the data are (from
ctest's environment), real MNIST, and `pstrain launch` of a script, read
back through its run directory. Tests skip (exit 77, ctest's
SKIP_RETURN_CODE) only when torch itself is missing."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import unittest

SKIP = 77

try:
    import torch  # noqa: F401  pylint: disable=unused-import
except ImportError:
    print("SKIP: no torch for %s (Debian: apt-get install python3-torch)" % sys.executable)
    sys.exit(SKIP)

SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("PSTRAIN_BIN_DIR") or os.path.join(SOURCE_DIR, "build", "bin")
DATA_DIR = os.path.join(SOURCE_DIR, "data", "mnist")
SCRIPT = os.path.join(SOURCE_DIR, "tests", "python", "scripts", "train_net.py")
PYTHON = sys.executable

PACKAGE_DIR = os.path.abspath(os.path.join(BIN_DIR, "..", "python"))
sys.path.insert(0, PACKAGE_DIR)
# The scripts the tests run themselves find the package too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [PACKAGE_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
os.environ.setdefault("PSTRAIN_LIBRARY", os.path.join(BIN_DIR, "..", "lib", "libpstrain.so"))


def spec(directory, workers, ps):
    """A cluster spec of loopback tasks (`pstrain launch --free_ports` picks
    their ports)."""
    path = os.path.join(directory, "spec_%dps_%dw.json" % (ps, workers))
    with open(path, "w") as f:
        json.dump({"cluster": {"worker": ["localhost:%d" % (2300 + i) for i in range(workers)],
                               "ps": ["localhost:%d" % (2400 + i) for i in range(ps)]}}, f)
    return path


def local_flags(run_dir, workers, ps):
    """`pstrain launch`'s flags for a job of `workers` workers and `ps` ps
    tasks on loopback ports, its run directory `run_dir`."""
    return ["--cluster_spec=" + spec(run_dir, workers, ps), "--free_ports", "--run_dir=" + run_dir]


class Launch:
    """`pstrain launch` of a command, its output read line by line as it
    comes (on_line(line) is called with each), to its end."""

    def __init__(self, flags, command, on_line=None, timeout_s=540, cwd=SOURCE_DIR):
        """command None: no "--" (a resume runs the recorded command)."""
        self.args = [os.path.join(BIN_DIR, "pstrain"), "launch"] + flags
        if command is not None:
            self.args += ["--"] + command
        self.lines = []
        self._on_line = on_line
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, cwd=cwd)
        self._timer = threading.Timer(timeout_s, self.process.kill)
        self._timer.start()

    def wait(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if self._on_line is not None:
                self._on_line(self.lines[-1])
        self.process.stdout.close()
        code = self.process.wait()
        self._timer.cancel()
        return code

    @property
    def output(self):
        return "\n".join(self.lines)


def launch(run_dir, flags, script_args, workers=2, ps=2, on_line=None):
    """Launches SCRIPT as every worker; returns (exit code, Launch)."""
    l = Launch(local_flags(run_dir, workers, ps) + ["--log_every_steps=20"] + flags,
               [PYTHON, SCRIPT, "--data_dir=" + DATA_DIR] + script_args, on_line=on_line)
    return l.wait(), l


def summary(run_dir):
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def started_pids(output_lines):
    """{task: pid} from the launcher's "started worker:1 (pid N)" lines."""
    pids = {}
    for line in output_lines:
        m = re.match(r"pstrain: (?:re)?started (\S+) \(pid (\d+)\)", line)
        if m:
            pids[m.group(1)] = int(m.group(2))
    return pids


_SCRIPTS = {}


def run_script(path, args):
    """Runs the script at `path` in this process as `python3 path args...`
    from SOURCE_DIR would: its main() parses sys.argv. For the one-process
    references: starting an interpreter and importing torch took 2.4 of a
    reference's 2.5 s (tests/python/scripts/idioms.py, 25 steps), and this
    process has torch already. The script sets what it depends on itself
    (seeds, torch's thread count), as it does in a process of its own."""
    module = _SCRIPTS.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "script_" + os.path.splitext(os.path.basename(path))[0], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SCRIPTS[path] = module
    argv, cwd = sys.argv, os.getcwd()
    sys.argv = [path] + list(args)
    os.chdir(SOURCE_DIR)
    try:
        module.main()
    finally:
        sys.argv = argv
        os.chdir(cwd)


class TestCase(unittest.TestCase):
    """A test with a temporary run directory of its own."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="pstrain_py_")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def run_dir(self, name):
        path = os.path.join(self.dir, name)
        os.makedirs(path, exist_ok=True)
        return path
