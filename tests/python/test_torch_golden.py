"""The golden run through pstrain.torch: two sync workers with batch B each,
as `pstrain launch` runs a PyTorch script, end with the parameters of one
plain PyTorch process (torch.optim.SGD) with batch 2B: the same initial
weights (the chief's are the job's), the same data order, 50 steps of real
MNIST through real ps processes over CURVE."""

import os
import subprocess
import unittest

import numpy

import pstrain_testing as t

STEPS = 50
# The tensors' device (the GPU checks run this test with cuda).
DEVICE = "--device=" + os.environ.get("PSTRAIN_TEST_DEVICE", "cpu")


class Golden(t.TestCase):
    def reference(self, batch, seed=1):
        out = os.path.join(self.dir, "reference_%d_%d.f32" % (batch, seed))
        t.run_script(t.SCRIPT, ["--data_dir=" + t.DATA_DIR, "--reference",
                                "--batch_size=%d" % batch, "--steps=%d" % STEPS, "--lr=0.01",
                                "--seed=%d" % seed, "--out=" + out, DEVICE])
        return numpy.fromfile(out, dtype=numpy.float32)

    def test_two_sync_workers_equal_one_process_with_the_same_global_batch(self):
        run = self.run_dir("two")
        code, launch = t.launch(run, ["--mode=sync"],
                                ["--batch_size=32", "--steps=%d" % STEPS, "--lr=0.01", DEVICE])
        self.assertEqual(code, 0, launch.output)
        two = numpy.fromfile(os.path.join(run, "final_params.f32"), dtype=numpy.float32)
        one = self.reference(64)
        self.assertEqual(two.size, one.size)
        self.assertEqual(two.size, 21840)
        s = t.summary(run)
        self.assertEqual(s["steps_per_worker"], STEPS)
        self.assertEqual(s["updates_applied"], STEPS)
        self.assertEqual(s["model"], "pytorch")
        # The job ran over CURVE (the launcher's job secret).
        with open(os.path.join(run, "logs", "ps-0.log")) as f:
            self.assertIn("CURVE on", f.read())

        # Training moved the parameters; the two runs differ by rounding.
        initial = self.reference_initial()
        moved = numpy.abs(one - initial).max()
        difference = numpy.abs(two.astype(numpy.float64) - one).max()
        print("RESULT torch_golden steps=%d %s max_abs_diff=%.3g update_max_abs=%.3g"
              % (STEPS, DEVICE, difference, moved))
        self.assertGreater(moved, 1e-3)
        self.assertLess(difference, 1e-5)
        # And the comparison can fail: another data order gives others.
        other = self.reference(64, seed=2)
        self.assertGreater(numpy.abs(other - one).max(), 1e-3)

    def test_a_model_in_pieces_in_plaintext_ends_where_one_process_does(self):
        # One tensor of 34 MB: over the 32 MiB from which a plaintext
        # connection carries a payload in pieces (pieces_test pins where),
        # so the push and the reply go in pieces, the ps puts each push
        # together in a buffer the next step's uses again, and the worker
        # writes each reply piece into the model.
        script = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "wide_model.py")
        run = self.run_dir("wide")
        launch = t.Launch(t.local_flags(run, 1, 1) + ["--insecure", "--mode=sync"],
                          [t.PYTHON, script, "--steps=4"], timeout_s=300)
        self.assertEqual(launch.wait(), 0, launch.output)

        def single(steps):
            out = os.path.join(self.dir, "wide_%d.f32" % steps)
            subprocess.run([t.PYTHON, script, "--single", "--steps=%d" % steps, "--out=" + out],
                           check=True, cwd=t.SOURCE_DIR)
            return numpy.fromfile(out, dtype=numpy.float32)

        job = numpy.fromfile(os.path.join(run, "final_params.f32"), dtype=numpy.float32)
        one, initial = single(4), single(0)
        self.assertEqual(job.size, 8_500_000)
        self.assertEqual(t.summary(run)["updates_applied"], 4)
        moved = numpy.abs(one.astype(numpy.float64) - initial).max()
        difference = numpy.abs(job.astype(numpy.float64) - one).max()
        print("RESULT torch_wide_pieces max_abs_diff=%.3g update_max_abs=%.3g"
              % (difference, moved))
        self.assertGreater(moved, 1e-2)
        self.assertLess(difference, 1e-6)

    def reference_initial(self):
        out = os.path.join(self.dir, "initial.f32")
        t.run_script(t.SCRIPT, ["--data_dir=" + t.DATA_DIR, "--reference",
                                "--initial", "--out=" + out])
        return numpy.fromfile(out, dtype=numpy.float32)


if __name__ == "__main__":
    unittest.main()
