"""Async and SSP jobs of a PyTorch script converge: one epoch of the seed's
CNN (dropout on) on real MNIST, two workers over two ps, each mode as
`pstrain launch --mode=...` gives it to the script's runtime."""

import os
import re
import unittest
import urllib.request

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


if __name__ == "__main__":
    unittest.main()
