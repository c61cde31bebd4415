"""Buffers that are not parameters (BatchNorm's running statistics) stay
with each worker: the ps holds the parameters only, so after a sync job
both workers hold the same parameters and each its own running mean and
variance, updated by its own batches; the chief evaluates with its own."""

import os
import unittest

import torch

import pstrain_testing as t

STEPS = 30


class Buffers(t.TestCase):
    def test_parameters_are_the_jobs_and_batchnorm_statistics_each_workers_own(self):
        run = self.run_dir("run")
        code, launch = t.launch(run, ["--mode=sync"],
                                ["--model=bn", "--steps=%d" % STEPS, "--lr=0.05", "--evaluate",
                                 "--dump_dir=" + run])
        self.assertEqual(code, 0, launch.output)
        chief = torch.load(os.path.join(run, "rank0.pt"))
        other = torch.load(os.path.join(run, "rank1.pt"))
        buffers = [k for k in chief if "running_" in k or "num_batches_tracked" in k]
        params = [k for k in chief if k not in buffers]
        self.assertEqual(len(buffers), 6)  # two BatchNorm layers, three each
        for k in params:
            self.assertTrue(torch.equal(chief[k], other[k]), k)
        for k in ("bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"):
            self.assertFalse(torch.equal(chief[k], other[k]), k)
            self.assertFalse(torch.equal(chief[k], torch.zeros_like(chief[k])), k)
        self.assertEqual(int(chief["bn1.num_batches_tracked"]), STEPS)
        self.assertEqual(int(other["bn1.num_batches_tracked"]), STEPS)
        # The ps saw the parameters only.
        s = t.summary(run)
        n = sum(chief[k].numel() for k in params)
        self.assertEqual(os.path.getsize(os.path.join(run, "final_params.f32")), 4 * n)
        self.assertGreater(s["final_test_accuracy"], 0.5)


if __name__ == "__main__":
    unittest.main()
