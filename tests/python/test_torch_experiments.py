"""The experiment commands take a PyTorch script as `launch` does:
`pstrain compare --modes=sync,async -- python3 train.py` trains it in each
mode and reports them side by side."""

import os
import subprocess
import unittest

import pstrain_testing as t


class Experiments(t.TestCase):
    def test_compare_runs_the_script_in_every_mode(self):
        out = os.path.join(self.dir, "compare")
        r = subprocess.run([os.path.join(t.BIN_DIR, "pstrain"), "compare",
                            "--cluster_spec=" + t.spec(self.dir, 2, 2), "--modes=sync,async",
                            "--max_steps=30", "--out=" + out, "--",
                            t.PYTHON, t.SCRIPT, "--data_dir=" + t.DATA_DIR, "--evaluate"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=t.SOURCE_DIR, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout)
        for mode in ("sync", "async"):
            s = t.summary(os.path.join(out, mode))
            self.assertEqual(s["mode"], mode)
            self.assertEqual(s["model"], "pytorch")
            self.assertEqual(s["steps_per_worker"], 30)
            self.assertGreater(s["final_test_accuracy"], 0.1)
        with open(os.path.join(out, "report.md")) as f:
            report = f.read()
        self.assertIn("| sync |", report)
        self.assertIn("| async |", report)
        self.assertIn("Evaluation: what the command's chief logs", report)


if __name__ == "__main__":
    unittest.main()
