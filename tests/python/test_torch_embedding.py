"""pst.Embedding: tables of rows by id on the ps tasks end where
nn.EmbeddingBag(sparse=True) with torch.optim's sparse optimizers ends in
one process (to float rounding, after 25 steps;
tests/python/scripts/embedding_net.py has the loop): one sync worker
against one process, two sync workers against one process of the global
batch; each table optimizer (SGD, Adagrad, SparseAdam), a table unused on
some steps, admission. Then what a script gets wrong is refused with a
message that says what to write."""

import os
import re
import signal
import subprocess
import threading
import unittest

import torch

import pstrain_testing as t
from idioms_testing import max_difference

SCRIPT = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "embedding_net.py")
TOLERANCE = 1e-5


class EmbeddingCase(t.TestCase):
    def reference(self, name, world, flags):
        out = os.path.join(self.dir, name + ".reference.pt")
        t.run_script(SCRIPT, ["--reference", "--world=%d" % world, "--out=" + out] + flags)
        return torch.load(out)

    def pstrain(self, name, workers, ps, flags, launch_flags=()):
        run = self.run_dir(name)
        out = os.path.join(self.dir, name + ".pstrain.pt")
        launch = t.Launch(t.local_flags(run, workers, ps) + ["--mode=sync"] + list(launch_flags),
                          [t.PYTHON, SCRIPT, "--out=" + out] + flags)
        code = launch.wait()
        self.assertEqual(code, 0, launch.output)
        return torch.load(out), t.summary(run), launch

    def compare(self, name, workers, ps, flags):
        ours, summary, _ = self.pstrain(name, workers, ps, flags)
        theirs = self.reference(name, workers, flags)
        difference = max_difference(ours, theirs)
        print("RESULT torch_embedding %s workers=%d ps=%d max_abs_diff=%.3g updates=%d"
              % (name, workers, ps, difference, summary["updates_applied"]), flush=True)
        self.assertLess(difference, TOLERANCE, name)
        tables = summary["embedding_tables"]
        self.assertEqual([t["name"] for t in tables],
                         ["first"] if "--shared" in flags else ["first", "second"])
        self.assertGreater(tables[0]["row_updates"], 0)
        self.assertGreater(tables[0]["memory_bytes"], tables[0]["row_bytes"])
        # The rows moved: a comparison of untrained tables proves nothing.
        untouched = self.reference(name + "_untrained", workers, flags + ["--steps=0"])
        self.assertGreater(max_difference(ours, untouched), 1e-2, name)
        return summary


class OneWorkerIsOneProcess(EmbeddingCase):
    def test_each_table_optimizer(self):
        for optimizer in ("sgd", "adagrad", "adam"):
            self.compare("one_" + optimizer, 1, 2, ["--table_optimizer=" + optimizer])

    def test_tables_read_together_in_one_request(self):
        # pst.EmbeddingBagCollection: both tables in one pull, the same
        # numbers as each table's own forward (and as one process).
        self.compare("together_adagrad", 1, 2, ["--collection", "--branch"])

    def test_one_table_read_twice_in_one_request(self):
        # A table shared by two features: pst.EmbeddingBagCollection([t, t]).
        self.compare("shared_collection", 1, 2, ["--shared", "--collection"])

    def test_a_table_unused_on_some_steps(self):
        # SparseAdam's step count moves only on the steps that use the table.
        self.compare("branch_adam", 1, 2, ["--branch", "--table_optimizer=adam"])


class WhatZeroGradClears(EmbeddingCase):
    """The DistributedOptimizer's zero_grad() clears the tables' row
    gradients, as one process's clears an nn.EmbeddingBag(sparse=True)
    weight's."""

    def test_a_batch_thrown_away_moves_no_row(self):
        # Forward and backward, then zero_grad: as a loop that drops a
        # batch, or a GradScaler's skipped step whose gradients overflowed.
        self.compare("discard_one", 1, 2, ["--discard_steps=3,8"])
        self.compare("discard_inf", 1, 2, ["--discard_steps=3,8", "--discard_inf",
                                           "--table_optimizer=adam"])
        self.compare("discard_two", 2, 2, ["--discard_steps=3,8", "--table_optimizer=adam"])

    def test_an_emptied_gradient_still_counts_a_sparse_adam_step(self):
        # zero_grad(set_to_none=False) leaves one process's table an empty
        # .grad, with which SparseAdam counts a step on the second table's
        # odd steps (its bias correction moves).
        self.compare("keep_adam", 1, 2, ["--branch", "--table_optimizer=adam",
                                         "--zero_grad=keep"])


class Prefetch(EmbeddingCase):
    """pst.Embedding.prefetch: the next step's rows asked for behind the
    step's push. One async worker reads the rows its own push made with or
    without it, so the run ends bitwise where the run without it ends;
    every forward but the first takes its rows from it, and a read between
    steps of those very ids asks the ps. Rows of other ids are not taken;
    sync takes none (its forward must see every worker's push)."""

    KEYS = ("head.weight", "head.bias", "first", "second")

    def run_job(self, name, mode, flags, workers=1):
        ours, summary, _ = self.pstrain(name, workers, 2, flags + ["--steps=12"],
                                        ["--mode=" + mode])
        return ours, summary

    def test_async_forwards_read_the_prefetched_rows_and_change_nothing(self):
        base = ["--branch", "--table_optimizer=adam"]
        plain, _ = self.run_job("prefetch_none", "async", base)
        other, _ = self.run_job("prefetch_other", "async", base + ["--prefetch=other"])
        self.assertEqual(int(other["prefetched"]), 0)
        # Each table on its own, then both through one EmbeddingBagCollection
        # (whose forward returns the very tensors each table's does).
        for together in (False, True):
            name = "prefetch_async" + ("_together" if together else "")
            flags = base + ["--prefetch=next", "--read_between"]
            ahead, summary = self.run_job(name, "async",
                                          flags + (["--collection"] if together else []))
            print("RESULT torch_embedding prefetch together=%d prefetched=%d max_abs_diff=%.3g"
                  % (together, int(ahead["prefetched"]),
                     max(float((plain[k] - ahead[k]).abs().max()) for k in self.KEYS)),
                  flush=True)
            # Every forward but the first: steps 1..11 read table 0, and
            # table 1 on the even ones; no read between steps.
            self.assertEqual(int(ahead["prefetched"]), 11 + 5, name)
            self.assertEqual(summary["embedding_tables"][1]["updates"], 6)
            for run in (ahead, other):
                for key in self.KEYS:
                    self.assertTrue(torch.equal(plain[key], run[key]), (name, key))

    def test_two_async_workers_take_their_own(self):
        # No one-process reference in async: each table update goes with a
        # dense one, and the chief's forwards took the prefetch.
        ours, summary = self.run_job("prefetch_two", "async", ["--prefetch=next"], workers=2)
        self.assertEqual(int(ours["prefetched"]), 2 * 11)
        self.assertEqual(summary["embedding_tables"][0]["updates"], summary["updates_applied"])

    def test_sync_takes_none(self):
        flags = ["--table_optimizer=adagrad", "--prefetch=next", "--steps=12"]
        ours, _ = self.run_job("prefetch_sync", "sync", flags)
        self.assertEqual(int(ours.pop("prefetched")), 0)
        difference = max_difference(ours, self.reference("prefetch_sync", 1, flags))
        self.assertLess(difference, TOLERANCE)


class TwoWorkersAreOneProcessOfTheGlobalBatch(EmbeddingCase):
    def test_rows_averaged_over_the_workers(self):
        self.compare("two_adagrad", 2, 2, ["--table_optimizer=adagrad", "--branch"])
        self.compare("two_adam", 2, 3, ["--table_optimizer=adam"])

    def test_flat_ids_first_weigh_each_worker_by_its_bags(self):
        # model(flat_ids, ..., offsets): each worker's examples are its bags
        # (of 1-3 ids), not its ids, in the sync average.
        self.compare("flat_two", 2, 2, ["--flat", "--table_optimizer=adam"])

    def test_a_step_whose_backward_reaches_only_rows(self):
        # The dense head frozen on every third step: each worker's backward
        # gives the tables' rows a gradient and no parameter one. The rows
        # are the step's gradient (not a step without one), as in one
        # process.
        self.compare("frozen_head", 2, 2, ["--table_optimizer=adagrad", "--freeze_head"])

    def test_a_schedule_sets_the_tables_lr(self):
        # emb.lr each step, as torch's schedulers set param_groups' lr.
        self.compare("decay_adam", 2, 2, ["--table_optimizer=adam", "--decay"])
        self.compare("decay_sgd", 1, 2, ["--table_optimizer=sgd", "--decay"])


class Admission(EmbeddingCase):
    def test_an_id_reads_as_zeros_until_admitted(self):
        # The reference drops the gradients of ids without a row and gives
        # an id its initial row at its third touch, as the ps does.
        self.compare("admit_adagrad", 1, 2, ["--admit_after=3"])
        summary = self.compare("admit_adam", 2, 2, ["--admit_after=2", "--branch",
                                                    "--table_optimizer=adam"])
        del summary


class Checkpoints(EmbeddingCase):
    """The tables are in the checkpoints (full files and deltas): a ps
    killed mid-run comes back, every shard and table rolls back to the
    newest checkpoint, and the job still ends where one process ends."""

    def launch_killing_ps0(self, name, launch_flags, script_flags, frozen_s=0):
        """A job of 2 workers and 2 ps whose ps:0 is killed (SIGKILL) once
        worker:0 logs step 22 of 50, after `frozen_s` seconds stopped
        (SIGSTOP); returns its run directory, output file and launch."""
        run = self.run_dir(name)
        out = os.path.join(self.dir, name + ".pt")
        killed, lines = [], []

        def on_line(line):
            lines.append(line)
            if not killed and re.match(r"\[worker:0\] .*step 22/50", line):
                pid = t.started_pids(lines)["ps:0"]
                killed.append(pid)
                if frozen_s:
                    os.kill(pid, signal.SIGSTOP)
                    threading.Timer(frozen_s, os.kill, (pid, signal.SIGKILL)).start()
                else:
                    os.kill(pid, signal.SIGKILL)

        launch = t.Launch(t.local_flags(run, 2, 2) + ["--log_every_steps=2"] + list(launch_flags),
                          [t.PYTHON, SCRIPT, "--out=" + out, "--steps=50"] + list(script_flags),
                          on_line=on_line)
        self.assertEqual(launch.wait(), 0, launch.output)
        self.assertEqual(len(killed), 1, "the job never reached step 22")
        return run, out, launch

    def test_a_killed_ps_rolls_the_tables_back_with_the_shards(self):
        flags = ["--table_optimizer=adam", "--admit_after=2", "--branch"]
        run, out, launch = self.launch_killing_ps0("killed", [
            "--mode=sync", "--checkpoint_every_steps=4", "--keep_checkpoints=2",
            "--restart_backoff_s=0"], flags)
        summary = t.summary(run)
        self.assertEqual(summary["restarts"], 1)
        self.assertIn("restored", launch.output)
        # Every worker rejoined (the library counts it: a step in which it
        # did is not judged for edits of the parameters).
        self.assertEqual(len(re.findall(r"\] rejoins [1-9]", launch.output)), 2, launch.output)
        difference = max_difference(torch.load(out),
                                    self.reference("killed", 2, ["--steps=50"] + flags))
        print("RESULT torch_embedding killed_ps max_abs_diff=%.3g recoveries=%s"
              % (difference, [r["what"] for r in summary.get("recoveries", [])]), flush=True)
        self.assertLess(difference, TOLERANCE)
        # Deltas were written (files of only what changed) and pruned.
        files = [f for _, _, names in os.walk(os.path.join(run, "checkpoints"))
                 for f in names if f.startswith("embedding-0-")]
        self.assertLessEqual(len(files), 4)

    def kill_ps0_with_a_standby(self, name, launch_flags, script_flags=(), frozen_s=0,
                                model_flags=(), tolerance=TOLERANCE):
        """The sync job of launch_killing_ps0 with a hot standby; returns the
        summary, the recoveries' sources and the output, having checked the
        result against one process (which `model_flags` go to as well) and
        that no update was lost."""
        flags = ["--table_optimizer=adam", "--admit_after=2", "--branch"] + list(model_flags)
        run, out, launch = self.launch_killing_ps0(
            name, ["--mode=sync", "--ps_replicas=1"] + list(launch_flags),
            flags + list(script_flags), frozen_s)
        summary = t.summary(run)
        difference = max_difference(torch.load(out),
                                    self.reference(name, 2, ["--steps=50"] + flags))
        recoveries = summary.get("recoveries", [])
        print("RESULT torch_embedding %s max_abs_diff=%.3g recoveries=%s"
              % (name, difference, [(r["source"], r.get("updates_lost", 0)) for r in recoveries]),
              flush=True)
        self.assertLess(difference, tolerance)
        self.assertTrue(recoveries, launch.output)
        self.assertTrue(all(r.get("updates_lost", 0) == 0 for r in recoveries), recoveries)
        return summary, [r["source"] for r in recoveries], launch.output

    def test_a_killed_ps_comes_back_from_its_standby(self):
        # --ps_replicas=1: the standby holds the tables too (whole once,
        # then deltas); the restarted ps gets them from it and nothing is
        # rolled back. ps:0 is frozen first: it dies holding requests it
        # never answered.
        _, sources, output = self.kill_ps0_with_a_standby("standby", ["--restart_backoff_s=0"],
                                                          frozen_s=1.0)
        self.assertEqual(sources, ["standby"], output)
        self.assertNotIn("rolled back by", output)

    def test_tables_over_the_message_limit_go_to_the_standby_in_parts(self):
        # Each ps's tables (rows of 1024 floats with Adam's two moments:
        # about 2 MB at the kill) are over --max_message_mb=1: the restored
        # ps and its standby send each other their tables whole in parts,
        # and the chief relays the standby's replica to the restarted ps,
        # or back from the standby that served it meanwhile (a failover),
        # in parts of at most a message each. Nothing is lost: either job
        # ends bit for bit where the same job ends without the kill.
        # (Against one process all three are 1.8e-4 off: rows of 1024
        # floats round more than the other tests' 8.)
        model = ["--dim=1024", "--ids=400"]
        flags = ["--table_optimizer=adam", "--admit_after=2", "--branch", "--steps=50"] + model
        uninterrupted, _, _ = self.pstrain("parts_whole", 2, 2, flags, ["--max_message_mb=1"])
        for name, launch_flags, script_flags, sources in (
                ("parts_restarted", ["--restart_backoff_s=0"], [], ["standby"]),
                ("parts_failover", ["--restart_backoff_s=4", "--failover_after_s=1"],
                 ["--step_sleep_ms=100"], ["failover", "failback"])):
            _, got, output = self.kill_ps0_with_a_standby(
                name, launch_flags + ["--max_message_mb=1"], script_flags, model_flags=model,
                tolerance=5e-4)
            self.assertEqual(got, sources, output)
            self.assertNotIn("cannot hold this shard", output)
            self.assertNotIn("rolled back by", output)
            self.assertRegex(output, r"\[ps:0\] .*sending ps:1 .* in parts of")
            self.assertRegex(output,
                             r"\[worker:0\] .*relaying the replica of shard 0 .* in parts of")
            killed = torch.load(os.path.join(self.dir, name + ".pt"))
            self.assertEqual(max_difference(killed, uninterrupted), 0.0, name)

    def test_async_tables_lose_nothing_with_their_standby(self):
        # Async: no one-process reference, but the invariants: every table
        # update went with its dense gradient (as many of each) and the
        # restarted ps lost none the workers were answered for.
        run, _, launch = self.launch_killing_ps0(
            "async_standby", ["--mode=async", "--ps_replicas=1", "--restart_backoff_s=0"],
            ["--table_optimizer=adagrad", "--admit_after=2"])
        summary = t.summary(run)
        recoveries = summary.get("recoveries", [])
        print("RESULT torch_embedding async_standby updates=%d table_updates=%s recoveries=%s"
              % (summary["updates_applied"], [x["updates"] for x in summary["embedding_tables"]],
                 [(r["source"], r.get("updates_lost", 0)) for r in recoveries]), flush=True)
        self.assertEqual([r["source"] for r in recoveries], ["standby"], launch.output)
        self.assertEqual(summary.get("updates_lost", 0), 0)
        self.assertEqual(summary["embedding_tables"][0]["updates"], summary["updates_applied"])

    def test_a_lost_ps_fails_over_to_its_standby_and_back(self):
        # The ps stays away past --failover_after_s: its standby serves its
        # shard and tables meanwhile, then gives them back.
        # Steps of 100 ms leave the ps time to come back before the end.
        _, sources, output = self.kill_ps0_with_a_standby(
            "failover", ["--restart_backoff_s=4", "--failover_after_s=1"], ["--step_sleep_ms=100"])
        self.assertIn("failover", sources, output)
        self.assertIn("failback", sources, output)

    def stop_at_step_30(self, run, out, flags):
        """A sync job of 60 steps with checkpoints every 4, stopped (SIGINT
        to the launcher) once step 30 is logged."""
        stopped = []

        def on_line(line):
            if not stopped and re.match(r"\[worker:0\] .*step 30/60", line):
                launch.process.send_signal(signal.SIGINT)
                stopped.append(line)

        launch = t.Launch(t.local_flags(run, 2, 2) + [
            "--mode=sync", "--checkpoint_every_steps=4", "--keep_checkpoints=2",
            "--log_every_steps=2"], [t.PYTHON, SCRIPT, "--out=" + out] + flags, on_line=on_line)
        self.assertNotEqual(launch.wait(), 0, launch.output)
        self.assertTrue(stopped, launch.output)

    def resume_and_compare(self, name, run, out, flags):
        resumed = t.Launch(["--resume=" + run], None)
        self.assertEqual(resumed.wait(), 0, resumed.output)
        match = re.search(r"restored by the chief from ckpt-(\d+)", resumed.output)
        self.assertIsNotNone(match, resumed.output)
        difference = max_difference(torch.load(out), self.reference(name, 2, flags))
        print("RESULT torch_embedding %s resumed_from=ckpt-%s max_abs_diff=%.3g"
              % (name, match.group(1), difference), flush=True)
        self.assertLess(difference, TOLERANCE)
        return resumed.output

    def test_a_stopped_job_resumes_from_a_delta(self):
        # With --keep_checkpoints=2 every other checkpoint is a delta after
        # a full file.
        run, out = self.run_dir("stopped"), os.path.join(self.dir, "stopped.pt")
        flags = ["--steps=60", "--table_optimizer=adam", "--admit_after=2"]
        self.stop_at_step_30(run, out, flags)
        self.resume_and_compare("stopped", run, out, flags)

    def test_a_job_resharded_from_2_to_4_ps_ends_where_one_process_does(self):
        run, out = self.run_dir("resharded"), os.path.join(self.dir, "resharded.pt")
        flags = ["--steps=60", "--table_optimizer=adagrad", "--admit_after=2", "--branch"]
        self.stop_at_step_30(run, out, flags)
        reshard = subprocess.run([os.path.join(t.BIN_DIR, "pstrain"), "reshard", run, "--ps=4"],
                                 capture_output=True, text=True, timeout=120)
        self.assertEqual(reshard.returncode, 0, reshard.stderr)
        self.assertIn("cut again for 4 ps (was 2)", reshard.stdout)
        output = self.resume_and_compare("resharded", run, out, flags)
        self.assertIn("[ps:3]", output)
        # Nothing to do the second time; a directory without checkpoints fails.
        again = subprocess.run([os.path.join(t.BIN_DIR, "pstrain"), "reshard", run, "--ps=4"],
                               capture_output=True, text=True, timeout=120)
        self.assertIn("nothing to do", again.stdout)
        empty = subprocess.run([os.path.join(t.BIN_DIR, "pstrain"), "reshard", self.dir, "--ps=4"],
                               capture_output=True, text=True, timeout=120)
        self.assertNotEqual(empty.returncode, 0)
        self.assertIn("no checkpoint", empty.stderr)


class DlrmExample(t.TestCase):
    """examples/pytorch/dlrm.py on a small synthetic Criteo set: 2 sync
    workers reach the AUC one process reaches at the global batch."""

    def test_sync_workers_reach_the_one_process_auc(self):
        data = os.path.join(self.dir, "criteo")
        subprocess.run([t.PYTHON, os.path.join(t.SOURCE_DIR, "tools", "criteo_synth.py"),
                        "--out=" + data, "--scale=0.001", "--train=12000", "--test=4000"],
                       check=True, timeout=300, stdout=subprocess.DEVNULL)
        example = os.path.join(t.SOURCE_DIR, "examples", "pytorch", "dlrm.py")
        flags = ["--data_dir=" + data, "--batch=64", "--max_steps=60"]
        one = subprocess.run([t.PYTHON, example, "--single", "--world=2"] + flags, check=True,
                             timeout=300, capture_output=True, text=True).stdout
        launch = t.Launch(t.local_flags(self.run_dir("dlrm"), 2, 2) + ["--mode=sync"],
                          [t.PYTHON, example] + flags)
        self.assertEqual(launch.wait(), 0, launch.output)
        theirs = float(re.search(r"test AUC ([0-9.]+)", one).group(1))
        ours = float(re.search(r"dlrm epoch 1: test AUC ([0-9.]+)", launch.output).group(1))
        print("RESULT dlrm_example one_process_auc=%.4f pstrain_auc=%.4f" % (theirs, ours),
              flush=True)
        self.assertGreater(theirs, 0.55)  # it learnt something
        self.assertLess(abs(ours - theirs), 0.002)


class MemoryCap(EmbeddingCase):
    def test_each_ps_keeps_its_rows_under_the_cap(self):
        # 200 ids of 2 tables over 2 ps; 5,242 bytes a ps hold 49 rows of 8
        # floats and their Adagrad sums (105 bytes each, record and index
        # entry included).
        _, summary, _ = self.pstrain("memory", 1, 2, [], ["--embedding_memory_mb=0.005"])
        tables = summary["embedding_tables"]
        rows = sum(t["rows"] for t in tables)
        evicted = sum(t["rows_evicted_memory"] for t in tables)
        print("RESULT torch_embedding memory_cap rows=%d evicted=%d" % (rows, evicted),
              flush=True)
        self.assertGreater(evicted, 0)
        self.assertLessEqual(rows, 2 * 49)
        self.assertGreater(rows, 2 * 40)  # the cap, not something else, bounds them


class BackupWorkers(EmbeddingCase):
    def test_a_late_workers_rows_go_with_its_dropped_gradient(self):
        # 3 sync workers, 1 backup: a version is the first 2 dense gradients
        # on each ps, with those ranks' rows only (the handler's test checks
        # the numbers); here the job runs through, late workers and all
        # (steps long enough that the third worker joins before the end).
        _, summary, _ = self.pstrain("backup", 3, 2, ["--steps=150", "--step_sleep_ms=20"],
                                     ["--backup_workers=1"])
        print("RESULT torch_embedding backup versions=%d late=%d table_updates=%d"
              % (summary["updates_applied"], summary["late_gradients_dropped"],
                 summary["embedding_tables"][0]["updates"]), flush=True)
        self.assertGreater(summary["late_gradients_dropped"], 0)
        # Every version applied the rows of the ranks in it, once.
        self.assertEqual(summary["embedding_tables"][0]["updates"], summary["updates_applied"])


class Refusals(EmbeddingCase):
    def run_refused(self, name, workers, flags, launch_flags, ps=1):
        run = self.run_dir(name)
        launch = t.Launch(t.local_flags(run, workers, ps) + list(launch_flags),
                          [t.PYTHON, SCRIPT, "--out=" + os.path.join(self.dir, "x.pt")] + flags)
        return launch.wait(), launch.output

    def test_workers_whose_tables_differ(self):
        code, output = self.run_refused("mismatch", 2, ["--mismatch"], [])
        self.assertNotEqual(code, 0, output)
        self.assertIn("embedding table 0 differs from the chief's", output)

    def test_a_negative_eps_is_refused_as_zero_is(self):
        # An eps below 0 was taken as "not given" (torch's default instead).
        for eps in ("-0.5", "0"):
            code, output = self.run_refused("eps" + eps, 1, ["--table_eps=" + eps], [])
            self.assertEqual(code, 2, output)
            self.assertIn("eps must be finite and > 0", output)

    def test_a_pull_whose_answer_is_over_the_message_limit(self):
        # 8,192 rows of 64 floats (2 MiB) in one answer, where
        # every task takes 1 MiB a message: the ps refuses the pull, saying
        # why, where the worker's ZeroMQ would drop the answer and the
        # worker wait for it (it did, until killed).
        script = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "big_pull.py")

        def big(name, ids, limit_mb, security=("--insecure",)):
            launch = t.Launch(t.local_flags(self.run_dir(name), 1, 1)
                              + list(security) + ["--max_message_mb=%d" % limit_mb],
                              [t.PYTHON, script, "--ids=%d" % ids, "--dim=64"], timeout_s=240)
            return launch.wait(), launch.output

        code, output = big("big_pull", 8192, 1)
        self.assertEqual(code, 1, output)
        self.assertIn("EMBEDDING_PULL refused: the answer to this EMBEDDING_PULL is 2.00 MB in "
                      "one message, over the 1.00 MB a task takes (--max_message_mb)", output)
        self.assertIn("not restarted again", output)
        # Under CURVE the same answer would go in pieces, which the worker
        # refuses past the limit: the ps refuses it first, saying why.
        code, output = big("big_pull_curve", 8192, 1, security=())
        self.assertEqual(code, 1, output)
        self.assertIn("EMBEDDING_PULL refused: the answer to this EMBEDDING_PULL is 2.00 MB in "
                      "one message, over the 1.00 MB a task takes (--max_message_mb)", output)
        # 4,050 rows: their answer fits (1,036,800 bytes), their gradients
        # with their ids do not (1,069,200): the worker does not send them.
        code, output = big("big_push", 4050, 1)
        self.assertEqual(code, 1, output)
        self.assertIn("this EMBEDDING_PUSH is 1.02 MB in one message, over the 1.00 MB a task "
                      "takes (--max_message_mb)", output)
        # Under the limit the same pull goes through.
        code, output = big("big_pull_fits", 8192, 4)
        self.assertEqual(code, 0, output)


if __name__ == "__main__":
    unittest.main(verbosity=2)
