"""A PyTorch worker recovers as a C++ one does: killed with SIGKILL in the
middle of a sync job, it is restarted by `pstrain launch`, rejoins at the
job's position and the job ends with the usual accuracy; a ps killed
under async workers computing ahead is restored and the job ends; a job resumed
from its checkpoints (`pstrain launch --resume`) continues where they left
it; the step log, the timeline and summary.json are written."""

import csv
import json
import os
import re
import signal
import threading
import unittest

import torch

import pstrain_testing as t


class Recovery(t.TestCase):
    def kill_at_step_100(self, task):
        """A sync job of one epoch whose `task` gets SIGKILL once it logged
        step 100 of 469; returns (summary, launch output)."""
        run = self.run_dir("run")
        killed, lines = [], []

        def on_line(line):
            lines.append(line)
            if not killed and re.match(r"\[%s\] .*step 100/469" % task, line):
                pid = t.started_pids(lines)[task]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        code, launch = t.launch(run, ["--mode=sync", "--restart_backoff_s=0",
                                      "--checkpoint_every_steps=50"],
                                ["--dropout", "--evaluate"], on_line=on_line)
        self.assertEqual(code, 0, launch.output)
        self.assertEqual(len(killed), 1, "%s never reached step 100" % task)
        s = t.summary(run)
        print("RESULT torch_kill task=%s accuracy=%.4f restarts=%d"
              % (task, s["final_test_accuracy"], s["restarts"]))
        self.assertEqual(s["restarts"], 1)
        self.assertEqual(s["task_restarts"][0]["task"], task)
        self.assertIn("restarted " + task, launch.output)
        # The restarted process joined where the job was, not at step 0.
        self.assertRegex(launch.output,
                         r"\[%s\] .*continuing from step [1-9][0-9]* of 469" % task)
        # The usual accuracy of one epoch of two sync workers (0.94 without
        # the kill; the seed's reference is about 0.94).
        self.assertGreater(s["final_test_accuracy"], 0.92)
        self.assertEqual(s["steps_per_worker"], 469)
        # The step log keeps the killed process's rows (each reaches the
        # file as it is written; the kill came after step 100's log line,
        # which its row may or may not have followed), then the restarted
        # one's, from where the job was.
        rank = int(task.split(":")[1])
        with open(os.path.join(run, "steps_worker%d.csv" % rank)) as f:
            steps = [int(row["step"]) for row in csv.DictReader(f)]
        self.assertTrue(set(range(99)) <= set(steps), sorted(set(range(99)) - set(steps)))
        self.assertEqual(max(steps), 468)
        return s, launch.output

    def test_a_killed_worker_is_restarted_and_the_job_ends_with_the_usual_accuracy(self):
        self.kill_at_step_100("worker:1")

    def test_a_killed_chief_is_restarted_and_never_initialises_the_job_again(self):
        s, output = self.kill_at_step_100("worker:0")
        # The shards lived on: the restarted chief registered, and nothing
        # was restored or lost.
        self.assertEqual(len(re.findall(r"\[worker:0\] .*initialised 2 shards", output)), 1)
        self.assertEqual(s.get("updates_lost", 0), 0)
        self.assertEqual(s["recoveries"], [])

    def test_a_ps_killed_under_workers_computing_ahead_is_restored_and_the_job_goes_on(self):
        # Async with forward_ahead: the steps in flight when ps:1 dies fail
        # where they land (the next step()), the workers rejoin once the
        # chief restored ps:1 from its checkpoint, and the job ends whole.
        run = self.run_dir("run")
        killed, lines = [], []

        def on_line(line):
            lines.append(line)
            if not killed and re.match(r"\[worker:0\] .*step 100/469", line):
                pid = t.started_pids(lines)["ps:1"]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        code, launch = t.launch(run, ["--mode=async", "--restart_backoff_s=0",
                                      "--checkpoint_every_steps=50"],
                                ["--dropout", "--evaluate", "--forward_ahead"], on_line=on_line)
        self.assertEqual(code, 0, launch.output)
        self.assertEqual(len(killed), 1, "worker:0 never reached step 100")
        s = t.summary(run)
        print("RESULT torch_ahead_ps_kill accuracy=%.4f restarts=%d mean_staleness=%.2f"
              % (s["final_test_accuracy"], s["restarts"], s["mean_staleness"]))
        self.assertEqual(s["restarts"], 1)
        self.assertEqual(s["task_restarts"][0]["task"], "ps:1")
        self.assertGreater(s["final_test_accuracy"], 0.90)

    def kill_ps1_at_pause(self, step, args, killed_says):
        """idioms.py (2 ps + 2 sync workers, checkpointed every 10 steps)
        twice: whole, and with ps:1 SIGKILLed while the chief waits at
        `step`; the killed run's output must hold each of `killed_says`,
        and both must end with the same parameters, bit for bit."""
        idioms = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "idioms.py")
        ends = {}
        for name in ("whole", "killed"):
            run = self.run_dir(name)
            out = os.path.join(self.dir, name + ".pt")
            go = os.path.join(self.dir, name + ".go")
            lines = []

            def on_line(line, name=name, go=go, lines=lines):
                lines.append(line)
                if "paused at step %d" % step not in line:
                    return
                if name == "killed":
                    os.kill(t.started_pids(lines)["ps:1"], signal.SIGKILL)
                open(go, "w").close()

            launch = t.Launch(t.local_flags(run, 2, 2) + [
                "--mode=sync", "--checkpoint_every_steps=10", "--restart_backoff_s=0"],
                [t.PYTHON, idioms, "--data_dir=" + t.DATA_DIR, "--out=" + out]
                + args + ["--pause_at=%d:%s" % (step, go)], on_line=on_line)
            self.assertEqual(launch.wait(), 0, launch.output)
            ends[name] = torch.load(out)
            if name == "killed":
                for said in killed_says:
                    self.assertIn(said, launch.output)
        for k, v in ends["whole"].items():
            self.assertTrue(torch.equal(v, ends["killed"][k]),
                            "%s: %g" % (k, float((v - ends["killed"][k]).abs().max())))

    def test_a_ps_restarted_from_its_checkpoint_takes_the_schedulers_back(self):
        # A sync job of 30 steps checkpointed every 10, a warm-up-and-decay
        # LambdaLR given to opt.fast_forward, Adam: ps:1 killed while the
        # chief waits at step 14. Its restart goes back to ckpt-10, the
        # workers with it, and their schedulers too: the job ends bit for
        # bit where the same job without the kill ends.
        self.kill_ps1_at_pause(14, ["--steps=30", "--optimizer=adam", "--lr=0.01",
                                    "--scheduler=warmup_linear"],
                               ["restarted ps:1",
                                "the job went from step 15 to step 10 (a ps restored from its "
                                "checkpoint or its standby): the schedulers given to "
                                "opt.fast_forward were set to it"])

    def test_a_chief_frozen_past_the_peer_timeout_takes_the_jobs_schedule_back(self):
        # The chief is stopped (SIGSTOP) at step 14 for longer than
        # --peer_timeout_s: worker:1 goes on alone, the shards with it; the
        # chief, continued, finds them ahead and skips to their version. Its
        # LambdaLR (given to opt.fast_forward) must follow: every step it
        # sends carries the learning rate the job's step has in the same
        # job undisturbed (the ps applies the chief's settings).
        idioms = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "idioms.py")
        lrs = {}
        for name in ("whole", "frozen"):
            run = self.run_dir(name)
            log = os.path.join(self.dir, name + ".lr")
            go = os.path.join(self.dir, name + ".go")
            lines = []

            def on_line(line, name=name, go=go, lines=lines):
                lines.append(line)
                if "paused at step 14" not in line:
                    return
                if name == "frozen":
                    chief = t.started_pids(lines)["worker:0"]
                    os.kill(chief, signal.SIGSTOP)
                    threading.Timer(6.0, os.kill, (chief, signal.SIGCONT)).start()
                open(go, "w").close()

            launch = t.Launch(t.local_flags(run, 2, 1) + [
                "--mode=sync", "--peer_timeout_s=2", "--max_restarts=0"],
                [t.PYTHON, idioms, "--data_dir=" + t.DATA_DIR, "--steps=300", "--slow_ms=20",
                 "--optimizer=sgd", "--lr=0.05", "--scheduler=warmup_linear",
                 "--lr_log=" + log, "--pause_at=14:" + go], on_line=on_line)
            self.assertEqual(launch.wait(), 0, launch.output)
            with open(log) as f:
                lrs[name] = [line.split() for line in f]
            if name == "frozen":
                jumped = re.search(r"the job went from step (\d+) to step (\d+) \(the shards went "
                                   r"on without this worker \(frozen or declared dead\)\): the "
                                   r"schedulers given to opt.fast_forward were set to it",
                                   launch.output)
                self.assertIsNotNone(jumped, launch.output)
                print("RESULT torch_frozen_chief from=%s to=%s" % jumped.groups())
        whole = {int(step): lr for step, lr in lrs["whole"]}
        self.assertEqual(sorted(whole), list(range(300)))
        sent = [(int(step), lr) for step, lr in lrs["frozen"] if int(step) < 300]
        self.assertGreater(len(sent), 14)
        self.assertLess(len(sent), 300, "the chief skipped no step: it was not frozen long enough")
        for step, lr in sent:
            self.assertEqual(lr, whole[step], "the chief's lr at the job's step %d" % step)

    def test_a_loop_that_ended_early_trains_its_steps_again_after_a_rollback(self):
        # Rank 1's loop takes 25 of the job's 40 steps; ps:1 is killed while
        # the chief waits at step 28, after rank 1 left. ps:1 comes back
        # from ckpt-20, the job with it: rank 1's steps 20-24 are gone, so
        # it fails ("start this worker again"), is restarted, trains them
        # again and leaves; the job ends bit for bit where it ends without
        # the kill.
        self.kill_ps1_at_pause(28, ["--steps=40", "--steps_on_rank=1:25", "--optimizer=adam",
                                    "--lr=0.01"],
                               ["restarted ps:1", "restarted worker:1"])

    def test_a_worker_frozen_until_the_job_ended_exits_zero(self):
        # worker:1 is stopped at step 14 of 60 for longer than the rest of
        # the job takes: the chief trains on alone and finishes; worker:1,
        # continued, finds the job over in whichever call it makes first
        # (the average in backward, a step) and ends as a loop longer than
        # the job does, exit 0.
        idioms = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "idioms.py")
        run = self.run_dir("run")
        go = os.path.join(self.dir, "go")
        lines = []

        def on_line(line):
            lines.append(line)
            if "paused at step 14" in line:
                worker = t.started_pids(lines)["worker:1"]
                os.kill(worker, signal.SIGSTOP)
                threading.Timer(8.0, os.kill, (worker, signal.SIGCONT)).start()
                open(go, "w").close()

        launch = t.Launch(t.local_flags(run, 2, 1) + [
            "--mode=sync", "--peer_timeout_s=2", "--max_restarts=0"],
            [t.PYTHON, idioms, "--data_dir=" + t.DATA_DIR, "--steps=60", "--slow_ms=10",
             "--pause_at=14:" + go], on_line=on_line)
        self.assertEqual(launch.wait(), 0, launch.output)
        self.assertNotIn("failed", launch.output)
        self.assertEqual(t.summary(run)["steps_per_worker"], 60)

    def test_a_resumed_job_continues_from_its_checkpoint(self):
        run = self.run_dir("run")
        first = t.local_flags(run, 2, 2) + ["--log_every_steps=20", "--mode=sync",
                                            "--checkpoint_every_steps=20", "--max_steps=40",
                                            "--timeline"]
        # The script by a path relative to the directory it is launched in.
        script = os.path.relpath(t.SCRIPT, t.SOURCE_DIR)
        launch = t.Launch(first, [t.PYTHON, script, "--data_dir=" + t.DATA_DIR, "--steps=0"])
        self.assertEqual(launch.wait(), 0, launch.output)
        self.assertEqual(t.summary(run)["steps_per_worker"], 40)
        self.assertTrue(os.path.exists(os.path.join(run, "checkpoints", "ckpt-40", "manifest.json")))
        # The timeline has the script's steps, per worker.
        with open(os.path.join(run, "timeline.json")) as f:
            events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        steps = [e for e in events if e.get("name") == "step"]
        self.assertGreaterEqual(len(steps), 2 * 40)
        # And its layers, as the C++ model's: each leaf module's forward and
        # the backward of each with parameters, inside a step's compute span
        # of the same worker.
        computes = {}
        for e in events:
            if e.get("name") == "compute":
                computes.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
        for layer in ("conv1", "conv2", "fc1", "fc2"):
            for kind in ("forward", "backward"):
                spans = [e for e in events if e.get("name") == "%s %s" % (kind, layer)]
                self.assertGreaterEqual(len(spans), 2 * 40, "%s %s" % (kind, layer))
                for e in spans:
                    self.assertTrue(any(a <= e["ts"] and e["ts"] + e["dur"] <= b
                                        for a, b in computes[e["pid"]]), e)
                # Times of the layer's work (a convolution or a matrix
                # product takes microseconds), not empty marks.
                timed = [e for e in spans if e["dur"] > 0]
                self.assertGreater(len(timed), len(spans) // 2, "%s %s" % (kind, layer))

        # Resumed with no command, from another directory, by a relative
        # path: the recorded command runs where it first ran, and finds the
        # run directory all the same.
        elsewhere = os.path.dirname(run)
        l = t.Launch(["--resume=" + os.path.relpath(run, elsewhere), "--max_steps=60"], None,
                     cwd=elsewhere)
        self.assertEqual(l.wait(), 0, l.output)
        self.assertIn("run the recorded command in " + os.path.realpath(t.SOURCE_DIR), l.output)
        s = t.summary(run)
        self.assertEqual(s["resumed_from"], "ckpt-40")
        self.assertEqual(s["steps_per_worker"], 60)
        self.assertEqual(s["updates_applied"], 60)
        # Each worker's step log holds steps 0..59 once each.
        for rank in (0, 1):
            with open(os.path.join(run, "steps_worker%d.csv" % rank)) as f:
                logged = [int(r["step"]) for r in csv.DictReader(f)]
            self.assertEqual(sorted(set(logged)), list(range(60)), "worker %d" % rank)


if __name__ == "__main__":
    unittest.main()
