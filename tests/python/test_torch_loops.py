"""Loops that end as users write them: workers whose own loops run
different numbers of steps (the one that ends first leaves the job, said,
and sync goes on without it; nothing hangs), and a loop longer than the
job (a restarted worker's own DataLoader), whose step() tells it the job
is done: it ends cleanly, exit 0. The loop: tests/python/scripts/idioms.py."""

import json
import os
import unittest

import torch

import idioms_testing as it
import pstrain_testing as t


class UnevenLoops(it.IdiomCase):
    def launch(self, name, workers, flags):
        run = self.run_dir(name)
        launch = t.Launch(t.local_flags(run, workers, 1) + ["--mode=sync", "--max_restarts=0"],
                          [t.PYTHON, it.IDIOMS, "--data_dir=" + t.DATA_DIR] + flags)
        return launch.wait(), launch.output, run

    def test_workers_of_uneven_loops_in_an_open_ended_sync_job(self):
        code, out, run = self.launch("open_ended", 2,
                                     ["--job_steps=0", "--steps=10", "--steps_on_rank=1:15"])
        self.assertEqual(code, 0, out)
        s = t.summary(run)
        # Ten versions of both workers, then five of worker 1 alone.
        self.assertEqual(s["updates_applied"], 15)
        with open(os.path.join(run, "logs", "ps-0.log")) as f:
            self.assertIn("rank 0 has finished (at step 10): the job goes on without it", f.read())

    def test_a_worker_whose_loop_ends_before_the_jobs_leaves_it(self):
        code, out, run = self.launch("shorter", 2,
                                     ["--job_steps=15", "--steps=15", "--steps_on_rank=1:10"])
        self.assertEqual(code, 0, out)
        self.assertIn("this worker's loop ended at step 10 of 15: it leaves the job", out)
        self.assertEqual(t.summary(run)["updates_applied"], 15)

    def test_a_loop_longer_than_the_job_ends_cleanly_at_its_end(self):
        code, out, run = self.launch("longer", 1, ["--job_steps=10", "--steps=40"])
        self.assertEqual(code, 0, out)
        self.assertIn("the job is done (step 10 of 10): this worker's loop ends here", out)
        self.assertNotIn("Traceback", out)
        self.assertNotIn("restart", out)
        self.assertEqual(t.summary(run)["updates_applied"], 10)


class Timeline(it.IdiomCase):
    def test_the_timeline_is_json_when_the_script_gives_no_loss(self):
        run = self.run_dir("timeline")
        launch = t.Launch(t.local_flags(run, 1, 1) + ["--timeline"],
                          [t.PYTHON, it.IDIOMS, "--data_dir=" + t.DATA_DIR, "--steps=5"])
        self.assertEqual(launch.wait(), 0, launch.output)

        def refuse(constant):
            raise ValueError("not JSON: %s" % constant)

        with open(os.path.join(run, "timeline.json")) as f:
            trace = json.loads(f.read(), parse_constant=refuse)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        steps = [e for e in events if e.get("name") == "step"]
        self.assertEqual(len(steps), 5)
        self.assertTrue(all(e["args"]["loss"] is None for e in steps))


class RestartedLoops(it.IdiomCase):
    LOOP = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "loader_loop.py")

    def job(self, name, flags):
        run = self.run_dir(name)
        out = os.path.join(self.dir, name + ".pt")
        # The ps waits for the restarted worker however long its new process
        # takes to start on a busy machine: one silent for --peer_timeout_s
        # (10 s by default) is presumed dead, and its step goes on without it.
        launch = t.Launch(t.local_flags(run, 2, 1) + ["--mode=sync", "--max_restarts=1",
                                                      "--peer_timeout_s=300"],
                          [t.PYTHON, self.LOOP, "--data_dir=" + t.DATA_DIR, "--out=" + out]
                          + flags)
        code = launch.wait()
        self.assertEqual(code, 0, launch.output)
        return torch.load(out), t.summary(run), launch.output

    def test_a_restarted_workers_own_loop_resumes_where_the_job_is(self):
        # Two epochs of 32 steps; worker 1 dies at step 40 and its new
        # process goes through its DataLoader from epoch 0: with
        # pst.ResumableSampler it skips the 40 steps the job did, and the
        # job ends at the uninterrupted job's parameters, bit for bit.
        whole, s, _ = self.job("whole", [])
        self.assertEqual(s["updates_applied"], 64)
        resumed, s, out = self.job("resumed", ["--fail_rank=1", "--fail_at=40"])
        self.assertIn("a failure at step 40", out)
        self.assertIn("restarted worker:1", out)
        self.assertEqual(s["updates_applied"], 64)
        self.assertEqual(it.max_difference(whole, resumed), 0)
        # torch's own sampler knows nothing of the job: the new process
        # trains on its data from the start, and the job ends elsewhere.
        plain, _, _ = self.job("torch_sampler", ["--sampler=torch", "--fail_rank=1",
                                                 "--fail_at=40"])
        self.assertGreater(it.max_difference(whole, plain), 1e-4)


if __name__ == "__main__":
    unittest.main()
