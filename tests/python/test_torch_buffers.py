"""Buffers that are not parameters (BatchNorm's running statistics) stay
with each worker: the ps holds the parameters only, so after a sync job
both workers hold the same parameters and each its own running mean and
variance, updated by its own batches; the chief evaluates with its own.
Each worker saves its own in the run directory, and a resumed job's
workers go on from them."""

import os
import unittest

import torch

import pstrain_testing as t

STEPS = 30


def dumped(run, rank):
    """Worker `rank`'s state_dict at the end of its last run (--dump_dir)."""
    return torch.load(os.path.join(run, "rank%d.pt" % rank))


class Buffers(t.TestCase):
    def bn_job(self, name, flags, on_line=None):
        """A sync job of the script's BatchNorm model, each worker dumping
        its state_dict into the run directory; returns (run, launch)."""
        run = self.run_dir(name)
        code, launch = t.launch(run, ["--mode=sync"] + flags,
                                ["--model=bn", "--steps=0", "--lr=0.05", "--dump_dir=" + run],
                                on_line=on_line)
        self.assertEqual(code, 0, launch.output)
        return run, launch

    def resume(self, run, max_steps):
        """The job resumed to `max_steps` with its recorded command; its output."""
        l = t.Launch(["--resume=" + run, "--max_steps=%d" % max_steps], None)
        self.assertEqual(l.wait(), 0, l.output)
        return l.output

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

    def test_a_resumed_jobs_workers_go_on_from_their_saved_statistics(self):
        run, _ = self.bn_job("resumed", ["--checkpoint_every_steps=20", "--max_steps=40"])
        for rank in (0, 1):
            saved = torch.load(os.path.join(run, "buffers", "worker%d.pt" % rank))
            self.assertEqual(saved["step"], 40)
            held = dumped(run, rank)
            self.assertEqual(set(saved["buffers"]), {k for k in held if "running_" in k or
                                                     "num_batches_tracked" in k})
            for k, v in saved["buffers"].items():
                self.assertTrue(torch.equal(v, held[k]), k)
        # Resumed from its checkpoint at step 40 for 20 more: each worker's
        # batch count goes on from its 40, its statistics from its own.
        output = self.resume(run, 60)
        self.assertEqual(t.summary(run)["steps_per_worker"], 60)
        self.assertEqual(output.count("buffers from"), 2, output)
        for rank in (0, 1):
            after = dumped(run, rank)
            self.assertEqual(int(after["bn1.num_batches_tracked"]), 60)
            self.assertEqual(int(after["bn2.num_batches_tracked"]), 60)

    def test_buffers_that_are_not_the_models_are_left_and_said_so(self):
        run, _ = self.bn_job("foreign", ["--checkpoint_every_steps=20", "--max_steps=20"])
        # Worker 0's file replaced by another model's buffers, worker 1's
        # by bytes that are no file of torch.save.
        torch.save({"step": 20, "buffers": {"other.running_mean": torch.zeros(3)}},
                   os.path.join(run, "buffers", "worker0.pt"))
        with open(os.path.join(run, "buffers", "worker1.pt"), "wb") as f:
            f.write(b"not a checkpoint")
        output = self.resume(run, 30)
        self.assertIn("not this model's buffers; this worker's buffers start afresh", output)
        self.assertIn("unreadable", output)
        for rank in (0, 1):
            self.assertEqual(int(dumped(run, rank)["bn1.num_batches_tracked"]), 10)

    def test_a_run_directory_that_takes_no_buffers_is_said_once_and_training_goes_on(self):
        run = self.run_dir("unwritable")

        def on_line(line):
            # A file where the directory goes, once the launcher has cleaned
            # the run directory (before it starts any task) and before the
            # workers (still importing torch) save anything.
            if "started worker:" in line and not os.path.exists(os.path.join(run, "buffers")):
                with open(os.path.join(run, "buffers"), "w") as f:
                    f.write("in the way")

        _, launch = self.bn_job("unwritable", ["--max_steps=20"], on_line=on_line)
        self.assertEqual(launch.output.count("cannot save this worker's buffers"), 2, launch.output)
        self.assertEqual(t.summary(run)["steps_per_worker"], 20)


if __name__ == "__main__":
    unittest.main()
