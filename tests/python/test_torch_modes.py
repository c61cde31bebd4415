"""Async and SSP jobs of a PyTorch script converge: one epoch of the seed's
CNN (dropout on) on real MNIST, two workers over two ps, each mode as
`pstrain launch --mode=...` gives it to the script's runtime; a worker
computing ahead (forward_ahead) takes each step's gradient one update
behind, exactly as one process doing so, and is refused in sync."""

import os
import re
import unittest
import urllib.request

import numpy
import torch

import pstrain_testing as t


class Modes(t.TestCase):
    def train(self, flags, on_line=None):
        run = self.run_dir("run")
        code, launch = t.launch(run, flags, ["--dropout", "--evaluate"], on_line=on_line)
        self.assertEqual(code, 0, launch.output)
        return t.summary(run), launch

    def test_async_converges(self):
        # Mid-run, the Python worker's /metrics answers Prometheus.
        scraped = []
        run = os.path.join(self.dir, "run")

        def on_line(line):
            if scraped or not re.match(r"\[worker:1\] .*step 100/469", line):
                return
            with open(os.path.join(run, "prometheus.yml")) as f:
                port = re.search(r"127\.0\.0\.1:(\d+)'\]\n\s+labels: \{task: 'worker:1'\}",
                                 f.read()).group(1)
            with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10) as r:
                scraped.append(r.read().decode())

        s, launch = self.train(["--mode=async", "--metrics"], on_line=on_line)
        self.assertEqual(len(scraped), 1, "worker:1 never logged step 100")
        self.assertRegex(scraped[0], r'pstrain_steps_total\{[^}]*task_index="1"[^}]*\} \d+')
        print("RESULT torch_async accuracy=%.4f images_per_sec=%.0f mean_staleness=%.2f"
              % (s["final_test_accuracy"], s["train_images_per_sec"], s["mean_staleness"]))
        self.assertEqual(s["mode"], "async")
        self.assertGreater(s["final_test_accuracy"], 0.90)
        self.assertEqual(s["updates_applied"], 2 * 469)  # every push applied
        self.assertIn("epoch 1/1 done: test accuracy", launch.output)

    def test_ssp_converges(self):
        s, _ = self.train(["--mode=ssp", "--staleness=2"])
        print("RESULT torch_ssp accuracy=%.4f max_staleness=%d"
              % (s["final_test_accuracy"], s["max_staleness"]))
        self.assertEqual(s["mode"], "ssp")
        self.assertEqual(s["staleness_bound"], 2)
        self.assertGreater(s["final_test_accuracy"], 0.90)
        # The bound held: between a worker's pull and its push the other
        # worker pushes at most 2s + 1 times (its steps from t - s to t + s).
        self.assertLessEqual(s["max_staleness"], 2 * 2 + 1)
        self.assertEqual(s["updates_applied"], 2 * 469)

    def test_forward_ahead_computes_each_step_on_the_parameters_one_update_behind(self):
        # One async worker computing ahead: step k's gradient is taken on
        # the parameters before update k - 1, which one process does
        # exactly (reference_ahead); the job's final parameters match it.
        steps, args = 40, ["--steps=40", "--lr=0.05", "--momentum=0"]
        run = self.run_dir("ahead")
        dump = self.run_dir("dump")
        code, launch = t.launch(run, ["--mode=async"],
                                args + ["--forward_ahead", "--dump_dir=" + dump], workers=1)
        self.assertEqual(code, 0, launch.output)
        ahead = numpy.fromfile(os.path.join(run, "final_params.f32"), dtype=numpy.float32)
        reference = self.reference(args + ["--forward_ahead"])
        plain = self.reference(args)
        difference = numpy.abs(ahead.astype(numpy.float64) - reference).max()
        print("RESULT torch_forward_ahead steps=%d max_abs_diff=%.3g from_plain_sgd=%.3g"
              % (steps, difference, numpy.abs(ahead - plain).max()))
        self.assertLess(difference, 1e-5)
        # The comparison can fail: plain SGD ends elsewhere.
        self.assertGreater(numpy.abs(ahead - plain).max(), 1e-4)
        # After finish() the script's model holds the job's final weights.
        state = torch.load(os.path.join(dump, "rank0.pt"))
        mine = torch.cat([v.reshape(-1) for v in state.values()]).numpy()
        self.assertEqual(numpy.abs(mine - ahead).max(), 0)
        s = t.summary(run)
        self.assertEqual(s["updates_applied"], steps)
        self.assertEqual(s["max_staleness"], 1)  # every push but the first one update late

    def test_forward_ahead_is_refused_where_it_cannot_be(self):
        run = self.run_dir("sync")
        code, launch = t.launch(run, ["--mode=sync"], ["--steps=2", "--forward_ahead"],
                                workers=1)
        self.assertEqual(code, 2, launch.output)  # the launcher: as the task, a bad configuration
        self.assertIn("worker:0 failed (exit code 2), a bad configuration", launch.output)
        self.assertIn('job option "forward_ahead": for async and ssp jobs', launch.output)

    def reference(self, args):
        out = os.path.join(self.dir, "reference_%d.f32" % len(os.listdir(self.dir)))
        t.run_script(t.SCRIPT, ["--data_dir=" + t.DATA_DIR, "--reference",
                                "--out=" + out] + args)
        return numpy.fromfile(out, dtype=numpy.float32)


if __name__ == "__main__":
    unittest.main()
