"""What the idiom tests share: tests/python/scripts/idioms.py run through
`pstrain launch` and as its reference (one process, or DDP with gloo), and
the two final models compared tensor by tensor."""

import os
import socket
import subprocess

import torch

import pstrain_testing as t

IDIOMS = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "idioms.py")
# The tensors' device (the GPU checks run these tests with cuda).
DEVICE = os.environ.get("PSTRAIN_TEST_DEVICE", "cpu")
# After 25 steps: float rounding, as the issue of one process's numbers
# asks (the runs here differ by 0 to 3e-6).
TOLERANCE = 1e-5
# What a ps says once where workers' settings of one sync version differ.
SETTINGS_DIFFER = "optimizer settings differ from rank"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def max_difference(a, b):
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


class IdiomCase(t.TestCase):
    """Runs one idiom both ways and returns the largest difference."""

    def reference(self, name, world, flags):
        out = os.path.join(self.dir, name + ".reference.pt")
        args = ["--data_dir=" + t.DATA_DIR, "--reference", "--world=%d" % world,
                "--port=%d" % free_port(), "--out=" + out, "--device=" + DEVICE] + flags
        if world == 1:
            t.run_script(IDIOMS, args)
        else:  # DDP's ranks are processes of their own
            subprocess.run([t.PYTHON, IDIOMS] + args, check=True, cwd=t.SOURCE_DIR, timeout=300)
        return torch.load(out, map_location="cpu")

    def pstrain(self, name, workers, ps, flags, launch_flags=(), settings_differ=False):
        """The idiom through pstrain; the ps tasks must say that workers'
        optimizer settings differed exactly where `settings_differ`."""
        run = self.run_dir(name)
        out = os.path.join(self.dir, name + ".pstrain.pt")
        launch = t.Launch(t.local_flags(run, workers, ps) + ["--mode=sync"] + list(launch_flags),
                          [t.PYTHON, IDIOMS, "--data_dir=" + t.DATA_DIR, "--out=" + out,
                           "--device=" + DEVICE] + flags)
        code = launch.wait()
        self.assertEqual(code, 0, launch.output)
        self.assertEqual(SETTINGS_DIFFER in launch.output, settings_differ, launch.output)
        s = t.summary(run)
        return torch.load(out, map_location="cpu"), s

    def compare(self, name, workers, ps, flags, reference_flags=None, expect_updates=None,
                reference_world=None):
        """The idiom through `workers` pstrain workers and `ps` ps tasks
        against the reference of `workers` ranks; returns the difference."""
        ours, s = self.pstrain(name, workers, ps, flags)
        theirs = self.reference(name, workers if reference_world is None else reference_world,
                                flags if reference_flags is None else reference_flags)
        difference = max_difference(ours, theirs)
        print("RESULT torch_idioms %s workers=%d ps=%d device=%s max_abs_diff=%.3g updates=%d"
              % (name, workers, ps, DEVICE, difference, s["updates_applied"]), flush=True)
        if expect_updates is not None:
            self.assertEqual(s["updates_applied"], expect_updates)
        self.assertLess(difference, TOLERANCE, name)
        return difference
