"""Loops that end as users write them: workers whose own loops run
different numbers of steps (the one that ends first leaves the job, said,
and sync goes on without it; nothing hangs), and a loop longer than the
job (a restarted worker's own DataLoader), whose step() tells it the job
is done: it ends cleanly, exit 0. The loop: tests/python/scripts/idioms.py."""

import os
import unittest

import idioms_testing as it
import pstrain_testing as t


class UnevenLoops(it.IdiomCase):
    def launch(self, name, workers, flags):
        run = self.run_dir(name)
        launch = t.Launch(["--cluster_spec=" + t.spec(run, workers, 1), "--free_ports",
                           "--run_dir=" + run, "--mode=sync", "--max_restarts=0"],
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


if __name__ == "__main__":
    unittest.main()
