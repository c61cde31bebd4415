"""What goes wrong in a PyTorch job is said plainly: a worker whose model
is not the chief's is refused naming the first tensor that differs (and
is not restarted: exit 2), a script that raises fails the job with its
Python traceback shown, a bad option is a configuration error, a resume that cannot run its
recorded command says why before it starts anything."""

import json
import os
import unittest

import pstrain_testing as t


class Errors(t.TestCase):
    def test_a_worker_with_another_layout_is_refused_naming_the_tensor(self):
        run = self.run_dir("run")
        code, launch = t.launch(run, ["--mode=sync", "--connect_timeout_s=60"],
                                ["--wider_on_rank=1", "--steps=20"])
        self.assertNotEqual(code, 0)
        out = launch.output
        self.assertIn("this worker's parameters differ from the chief's at tensor 4: "
                      "fc1.weight (16320 floats) here, fc1.weight (16000 floats) at the chief", out)
        self.assertIn("[worker:1] pstrain.ConfigError", out.replace("pstrain._lib.", "pstrain."))
        # A bad configuration is not restarted: it would fail the same way.
        self.assertIn("worker:1 failed (exit code 2), a bad configuration or input: not restarted",
                      out)
        self.assertNotIn("restarting it", out)

    def test_a_script_that_raises_fails_the_job_with_its_traceback(self):
        run = self.run_dir("run")
        code, launch = t.launch(run, ["--mode=sync", "--max_restarts=0"],
                                ["--raise_at_step=5", "--steps=20"])
        self.assertEqual(code, 1, launch.output)
        out = launch.output
        self.assertIn("[worker:1] Traceback (most recent call last):", out)
        self.assertIn("[worker:1] RuntimeError: a bug in the user's script at step 5", out)
        self.assertIn("worker:1 failed (exit code 1)", out)
        self.assertFalse(t.os.path.exists(t.os.path.join(run, "summary.json")))

    def test_a_worker_that_exits_without_an_optimizer_fails_the_job_at_once(self):
        # Rank 1 ends after init(), as `if not pst.is_chief(): sys.exit()`
        # would: the chief would wait for it to join (--register_timeout_s);
        # it says so and exits 2, and the job fails without waiting.
        run = self.run_dir("run")
        launch = t.Launch(t.local_flags(run, 2, 1) + ["--mode=sync", "--register_timeout_s=300"],
                          [t.PYTHON, "-c", "import sys, pstrain.torch as pst\npst.init()\n"
                           "if pst.rank() == 1:\n    sys.exit(0)\n"
                           "import torch\nm = torch.nn.Linear(2, 1)\n"
                           "opt = pst.DistributedOptimizer(m, 'sgd', lr=0.1, total_steps=3)\n"
                           "print('joined at step %d' % opt.global_step)\n"])
        code = launch.wait()
        self.assertNotEqual(code, 0, launch.output)
        self.assertIn("[worker:1] pstrain: this worker exits without having made a "
                      "DistributedOptimizer", launch.output)
        self.assertIn("worker:1 failed (exit code 2)", launch.output)

    def test_an_option_the_optimizer_does_not_take_is_a_configuration_error(self):
        run = self.run_dir("run")
        code, launch = t.launch(run, ["--mode=sync"], ["--optimizer=adam", "--adam_momentum"],
                                workers=1, ps=1)
        self.assertNotEqual(code, 0)
        self.assertIn("pstrain.ConfigError: adam takes no option 'momentum'", launch.output)
        self.assertIn("worker:0 failed (exit code 2), a bad configuration or input: not restarted",
                      launch.output)


class EdgeModels(t.TestCase):
    SCRIPT = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "edge_models.py")

    def launch(self, kind):
        run = self.run_dir(kind)
        launch = t.Launch(t.local_flags(run, 1, 1) + ["--max_restarts=0"],
                          [t.PYTHON, self.SCRIPT, kind])
        return launch.wait(), launch.output

    def test_torchscript_no_grad_and_zero_size_parameters_train(self):
        for kind in ("script", "no_grad", "zero_size"):
            code, out = self.launch(kind)
            self.assertEqual(code, 0, out)
            self.assertIn("trained %s: 5 steps" % kind, out)

    def test_a_model_pstrain_cannot_train_is_refused_saying_what_to_do(self):
        for kind, says in (("meta", "the model is on meta; pstrain.torch trains models on the CPU "
                                    "or a CUDA GPU: model.to('cpu') or model.to('cuda')"),
                           ("half", "pstrain trains float32 parameters (for mixed precision, "
                                    "keep them float32 and use torch.autocast)")):
            code, out = self.launch(kind)
            self.assertEqual(code, 2, out)  # the launcher: as the task, a bad configuration
            self.assertIn(says, out)
            self.assertIn("worker:0 failed (exit code 2), a bad configuration", out)
            # The ps tasks it stopped say so, without an error of their own.
            self.assertNotIn("ps_server: error:", out)

    def test_a_configuration_error_in_init_exits_2(self):
        env = dict(os.environ, TF_CONFIG='{"cluster": {"ps": ["localhost:1"]}, "task": 7}')
        p = t.subprocess.run([t.PYTHON, self.SCRIPT, "script"], env=env, cwd=t.SOURCE_DIR,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("pstrain.ConfigError", p.stderr)


class EditedParameters(t.TestCase):
    """Parameters belong to the ps once the job began: a loop that edits
    them is refused saying how, never run with the edit lost."""
    SCRIPT = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "edited_params.py")

    def launch(self, kind, workers=1, mode="sync"):
        run = self.run_dir(kind)
        launch = t.Launch(t.local_flags(run, workers, 1) + ["--max_restarts=0", "--mode=" + mode],
                          [t.PYTHON, self.SCRIPT, kind])
        return launch.wait(), launch.output

    def test_an_edit_after_the_job_began_is_refused_naming_it(self):
        for kind, says in (
                ("clamp", "the model's parameters changed after the job began ((through .data))"),
                ("clamp_in_step",
                 "the model's parameters changed after the job began ((through .data))"),
                ("reload", "the model's parameters changed after the job began (emb.weight, "
                           "fc.weight, fc.bias)"),
                ("max_norm", "the model's parameters changed after the job began (emb.weight)"),
                ("sparse", "parameter emb.weight has a sparse gradient"),
                ("dampening", "dampening=0.5 is not something the ps runs"),
                ("inner_step", "finish(): the model's parameters changed since the job's last "
                               "step (emb.weight, fc.weight, fc.bias)")):
            code, out = self.launch(kind)
            self.assertEqual(code, 2, out)  # the launcher: as the task, a bad configuration
            self.assertIn(says, out, kind)
            self.assertIn("worker:0 failed (exit code 2), a bad configuration", out)
            self.assertNotIn("trained %s" % kind, out)
        for kind, says in (
                ("state_read", "opt.state: the optimizer's state is on the ps tasks once the job "
                               "has begun; opt.state_dict()['state'] reads it"),
                ("state_reset", "opt.state = ...: the optimizer's state is on the ps tasks"),
                ("plateau_ff", "opt.fast_forward(ReduceLROnPlateau): it takes schedulers "
                               "stepped once a step without an argument")):
            code, out = self.launch(kind)
            self.assertEqual(code, 1, out)
            self.assertIn(says, out, kind)
            self.assertNotIn("trained %s" % kind, out)

    def test_a_change_before_the_first_step_a_swap_and_back_and_a_copy_train(self):
        # lr 0: the job keeps the chief's assigned values, which worker 1
        # (whose own assignment the ps's parameters replace) ends with too.
        code, out = self.launch("assign_before", workers=2)
        self.assertEqual(code, 0, out)
        self.assertIn("[worker:1] trained assign_before: 5 steps, fc.weight [0.5, 0.5, 0.5, 0.5, "
                      "0.5, 0.5, 0.5, 0.5]", out)
        for kind in ("ema_swap", "ema_deepcopy", "swap_in_step"):
            code, out = self.launch(kind)
            self.assertEqual(code, 0, out)
            self.assertIn("trained %s: 5 steps" % kind, out)

    def test_a_copy_of_a_workers_own_initial_parameters_is_said(self):
        # Each worker seeded by its rank, an EMA's copy.deepcopy before the
        # optimizer's first use: worker 1's copy holds its own values, not
        # the job's (DDP would have broadcast rank 0's), and it says so; the
        # chief's are the job's. Copied after reading global_step, nothing.
        said = "a copy of the model made before the optimizer's first use"
        code, out = self.launch("ema_early", workers=2)
        self.assertEqual(code, 0, out)
        self.assertIn("[worker:1] pstrain: " + said, out)
        self.assertNotIn("[worker:0] pstrain: " + said, out)
        self.assertIn("[worker:1] trained ema_early: 5 steps", out)
        code, out = self.launch("ema_joined", workers=2)
        self.assertEqual(code, 0, out)
        self.assertNotIn(said, out)
        self.assertIn("[worker:1] trained ema_joined: 5 steps", out)
        # Seeded alike, async, worker 1 joining after the chief's steps: its
        # copy is the job's initial values, which the job has left; nothing.
        code, out = self.launch("ema_late", workers=2, mode="async")
        self.assertEqual(code, 0, out)
        self.assertIn("[worker:0] trained ema_late", out)
        self.assertRegex(out, r"\[worker:1\] joined at step [1-9]")
        self.assertNotIn(said, out)


class Resume(t.TestCase):
    def test_a_resume_whose_commands_directory_is_gone_says_so_and_starts_nothing(self):
        run = self.run_dir("run")
        work = os.path.join(self.dir, "work")
        os.makedirs(work)
        # A job whose command fails at once: its launch.json is written all
        # the same, with the command and its directory.
        first = t.Launch(t.local_flags(run, 1, 1) + ["--max_restarts=0"], ["/bin/false"],
                         cwd=work)
        self.assertNotEqual(first.wait(), 0, first.output)
        with open(os.path.join(run, "launch.json")) as f:
            record = json.load(f)
        self.assertEqual(record["user_command"], ["/bin/false"])
        self.assertEqual(record["working_dir"], os.path.realpath(work))
        os.rmdir(work)
        resumed = t.Launch(["--resume=" + run], None, cwd=self.dir)
        self.assertEqual(resumed.wait(), 2, resumed.output)
        self.assertIn(os.path.realpath(work) + ": the command's directory", resumed.output)
        self.assertIn("give the command again after --", resumed.output)
        self.assertNotIn("started ps:0", resumed.output)


if __name__ == "__main__":
    unittest.main()
