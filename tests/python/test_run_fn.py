"""pstrain.runner.run(fn): a Python function as every worker of a real
job (`pstrain launch`, ps processes, MNIST) started from this process as
from a notebook. The chief's return value comes back; a module's
function travels by plain pickle and a closure with cloudpickle (without
it: a clear refusal); a worker that raises fails the job and its
traceback reaches the caller; a flag `pstrain launch` does not take is
refused before anything starts; the run directory is a launched job's."""

import contextlib
import io
import os
import sys
import unittest

import pstrain_testing as t

sys.path.insert(0, os.path.join(t.SOURCE_DIR, "tests", "python", "scripts"))
import run_fns  # noqa: E402  pylint: disable=wrong-import-position

import pstrain  # noqa: E402  pylint: disable=wrong-import-position
from pstrain.runner import (  # noqa: E402  pylint: disable=wrong-import-position
    JobError, WorkerError, run)


@contextlib.contextmanager
def without_cloudpickle():
    """This process as if cloudpickle were not installed."""
    saved = sys.modules.get("cloudpickle")
    sys.modules["cloudpickle"] = None  # import cloudpickle raises ImportError
    try:
        yield
    finally:
        if saved is None:
            del sys.modules["cloudpickle"]
        else:
            sys.modules["cloudpickle"] = saved


@contextlib.contextmanager
def working_dir(path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


class RunFn(t.TestCase):
    def test_a_module_function_returns_the_chiefs_value_and_the_job_is_a_launched_ones(self):
        run_dir = os.path.join(self.dir, "run")
        out = io.StringIO()
        with without_cloudpickle(), contextlib.redirect_stdout(out):
            result = run(run_fns.train, t.DATA_DIR, 30, num_workers=2, num_ps=1, mode="sync",
                         run_dir=run_dir)
        self.assertEqual(result["rank"], 0)
        self.assertEqual(result["num_workers"], 2)
        summary = t.summary(run_dir)
        self.assertEqual(summary["mode"], "sync")
        self.assertEqual(summary["num_workers"], 2)
        self.assertEqual(summary["num_ps"], 1)
        self.assertAlmostEqual(summary["final_test_accuracy"], result["accuracy"], places=4)
        self.assertGreater(result["accuracy"], 0.5)
        for name in ("job.secret", "launch.json", "logs/worker-1.log", "run_fn/call.pkl",
                     "run_fn/result.pkl", "run_fn/cluster.json"):
            self.assertTrue(os.path.exists(os.path.join(run_dir, name)), name)
        # The job's output reached this process's sys.stdout, as --echo=progress shows it.
        text = out.getvalue()
        self.assertIn("pstrain: launching %s/run_fn/cluster.json" % run_dir, text)
        self.assertIn("[worker:0] accuracy", text)
        self.assertIn("== pstrain summary: %s ==" % run_dir, text)

    def test_a_closure_travels_with_cloudpickle(self):
        self.assertIsNotNone(__import__("importlib").util.find_spec("cloudpickle"),
                             "tools/setup.sh installs python3-cloudpickle")
        steps = 10

        def train_and_scale(scale):
            return scale * run_fns.train(t.DATA_DIR, steps)["num_workers"]

        run_dir = os.path.join(self.dir, "run")
        self.assertEqual(run(train_and_scale, 7, num_workers=1, run_dir=run_dir, quiet=True), 7)

    def test_without_cloudpickle_a_closure_is_refused_saying_what_to_do(self):
        run_dir = os.path.join(self.dir, "run")
        with without_cloudpickle(), self.assertRaises(pstrain.ConfigError) as caught:
            run(lambda: 1, run_dir=run_dir)
        message = str(caught.exception)
        self.assertIn("is a lambda", message)
        self.assertIn("apt-get install python3-cloudpickle", message)
        self.assertIn("define the function in a module", message)
        self.assertFalse(os.path.exists(run_dir))

    def test_a_worker_that_raises_fails_the_job_with_its_traceback(self):
        run_dir = os.path.join(self.dir, "run")
        with self.assertRaises(WorkerError) as caught:
            run(run_fns.fail_at_rank, 1, t.DATA_DIR, num_workers=2, run_dir=run_dir,
                max_restarts=0, quiet=True)
        e = caught.exception
        self.assertEqual((e.rank, e.task, e.exit_code), (1, "worker:1", 1))
        self.assertIn("Traceback (most recent call last):", e.traceback)
        self.assertIn('run_fns.py", line', e.traceback)
        self.assertIn("in fail_at_rank", e.traceback)
        self.assertIn("ValueError: a bug in the user's function at rank 1", e.traceback)
        self.assertIn("rank 1 (worker:1) failed", str(e))
        self.assertIn(e.traceback.rstrip("\n"), str(e))
        self.assertIn("worker:1 failed (exit code 1)", e.output)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "summary.json")))

    def test_a_function_that_never_joins_the_job_is_refused(self):
        run_dir = os.path.join(self.dir, "run")
        with self.assertRaises(WorkerError) as caught:
            run(run_fns.never_init, num_workers=1, run_dir=run_dir, quiet=True)
        self.assertIn("never_init returned without calling pstrain.torch.init()",
                      caught.exception.traceback)

    def test_concurrent_calls_each_get_their_own_run_and_value(self):
        # Two calls in one second from one directory: each default run
        # directory is its own (runs/<time>-<mode>, then -2).
        import threading  # pylint: disable=import-outside-toplevel
        results = {}

        def call(value):
            results[value] = run(run_fns.echo, value, t.DATA_DIR, num_workers=1, quiet=True)

        with working_dir(self.dir):
            threads = [threading.Thread(target=call, args=(v,)) for v in ("A", "B")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            self.assertEqual(results, {"A": "A", "B": "B"})
            self.assertEqual(len(os.listdir(os.path.join(self.dir, "runs"))), 2)

    def test_a_rank_that_returns_without_training_fails_the_job_at_once(self):
        # Rank 1 returns after init(): the chief would wait for it to join
        # (--register_timeout_s, 600 s); the job fails naming rank 1.
        run_dir = os.path.join(self.dir, "run")
        with self.assertRaises(WorkerError) as caught:
            run(run_fns.leave_early, t.DATA_DIR, num_workers=2, run_dir=run_dir, quiet=True,
                register_timeout_s=300)
        e = caught.exception
        self.assertEqual(e.rank, 1)
        self.assertIn("leave_early returned on rank 1 without making a DistributedOptimizer",
                      e.traceback)

    def test_a_failure_is_the_last_attempts_not_an_earlier_error(self):
        # Rank 1 raised once and was restarted; then the chief was killed:
        # the job's failure is the chief's, not rank 1's earlier traceback.
        run_dir = os.path.join(self.dir, "run")
        with self.assertRaises(JobError) as caught:
            run(run_fns.fail_once_then_lose_the_chief, num_workers=2, run_dir=run_dir,
                quiet=True, max_restarts=1, restart_backoff_s=0)
        self.assertNotIsInstance(caught.exception, WorkerError, str(caught.exception))
        self.assertIn("worker:0", str(caught.exception))

    def test_a_processes_the_function_left_running_end_with_its_task(self):
        import time  # pylint: disable=import-outside-toplevel
        pid = run(run_fns.leave_a_child, t.DATA_DIR, num_workers=1,
                  run_dir=os.path.join(self.dir, "run"), quiet=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    if f.read().split(")")[-1].split()[0] == "Z":
                        break  # killed, its reaper not there yet
            except FileNotFoundError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            self.fail("the function's child process %d outlived the job" % pid)

    def test_a_flag_launch_does_not_take_is_refused_before_anything_starts(self):
        with working_dir(self.dir):
            with self.assertRaises(pstrain.ConfigError) as caught:
                run(run_fns.train, t.DATA_DIR, 10, no_such_flag=1, quiet=True)
            self.assertIn("Unknown command line flag 'no_such_flag'", str(caught.exception))
            self.assertIn("`pstrain launch --help` lists them", str(caught.exception))
            with self.assertRaises(pstrain.ConfigError) as caught:
                run(run_fns.train, t.DATA_DIR, 10, epochs="many", quiet=True)
            self.assertIn("Illegal value 'many' specified for flag 'epochs'", str(caught.exception))
            with self.assertRaises(pstrain.ConfigError) as caught:
                run(run_fns.train, t.DATA_DIR, 10, mode="fast", quiet=True)
            self.assertIn('--mode: "fast"', str(caught.exception))
            self.assertEqual(os.listdir(self.dir), [], "a refused job leaves no run directory")
        with self.assertRaises(TypeError):
            run(run_fns.train, cluster_spec="x.json")
        self.assertTrue(issubclass(WorkerError, JobError))
        # As the docs and tracebacks name them.
        self.assertIs(pstrain.WorkerError, WorkerError)
        self.assertIs(pstrain.JobError, JobError)


if __name__ == "__main__":
    unittest.main()
