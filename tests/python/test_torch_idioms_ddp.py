"""Everyday PyTorch idioms through pstrain.torch with two sync workers end
where DDP with two gloo ranks ends, each rank on the same share of each
global batch as the worker of its rank (to float rounding, after 25
steps): backward() ends with the workers' averaged gradient in .grad, as
DDP's, so clipping and GradScaler's inf check see the whole batch's
gradient; a parameter no worker used is left alone, one some workers used
gets the average; a worker that skipped backward() adds nothing to the
step's average; the average in .grad replaced as torch.optim reads it.
The loop: tests/python/scripts/idioms.py."""

import unittest

import idioms_testing as it


class TwoWorkersAreDdp(it.IdiomCase):
    def test_a_branch_used_on_some_steps(self):
        self.compare("branch_none", 2, 1, ["--branch", "--set_to_none=1"])
        self.compare("branch_zero_bf16", 2, 2, ["--branch", "--set_to_none=0", "--amp=bf16",
                                                "--optimizer=adam", "--lr=0.01"])

    def test_clipping_sees_the_averaged_gradient(self):
        self.compare("clip_norm", 2, 2, ["--clip=norm"])
        self.compare("clip_value_groups_onecycle", 2, 1, ["--clip=value", "--optimizer=adamw",
                                                          "--groups", "--scheduler=onecycle",
                                                          "--lr=0.01"])

    def test_an_overflow_on_one_worker_skips_the_step_on_every_worker(self):
        # Worker 1's loss overflows at steps 5 and 6: the average is not
        # finite on both, both skip, and the scale backs off on both.
        self.compare("scaler", 2, 2, ["--amp=scaler", "--clip=norm"], expect_updates=23)

    def test_gradient_accumulation(self):
        self.compare("no_sync", 2, 1, ["--accumulate=no_sync", "--optimizer=adagrad"])
        self.compare("two_passes", 2, 1, ["--accumulate=passes", "--optimizer=adam",
                                          "--lr=0.01"])

    def test_a_parameter_unfrozen_midway(self):
        # DDP takes no parameter frozen when it is made: the reference is
        # one process with the global batch (both workers' rows).
        self.compare("unfreeze", 2, 2, ["--unfreeze_at=10", "--optimizer=adam", "--lr=0.01"],
                     reference_flags=["--unfreeze_at=10", "--optimizer=adam", "--lr=0.01",
                                      "--batch_size=32"], reference_world=1)

    def test_gradients_replaced_after_the_average(self):
        # The average in .grad (views of the flat buffer) transposed, and
        # two parameters' exchanged, before step(). The reference is one
        # process with the global batch (the edits reach into the model,
        # which DDP wraps).
        for name, flags in (("grad_transpose", ["--grad_edit=transpose", "--set_to_none=0"]),
                            ("grad_swap", ["--grad_edit=swap", "--set_to_none=0",
                                           "--optimizer=adam", "--lr=0.01"])):
            self.compare(name, 2, 2, flags, reference_flags=flags + ["--batch_size=32"],
                         reference_world=1)

    def test_a_worker_that_skips_backward_but_steps(self):
        # Worker 1 calls step() without backward() at steps 3, 4 and 9 (a
        # branch that skips a batch's backward): its examples are out of
        # those steps' average, as if its rows had not been in the global
        # batch. DDP would wait for it forever; the reference is one
        # process whose batch holds worker 0's rows at those steps.
        flags = ["--skip_backward=3,4,9", "--clip=norm"]
        self.compare("skip_backward", 2, 2, flags,
                     reference_flags=flags + ["--batch_size=32"], reference_world=1)
        # zero_grad(set_to_none=False), PyTorch 1.13's default: its .grad
        # is zeros, not None, and still adds nothing.
        flags = ["--skip_backward=3,4,9", "--set_to_none=0", "--optimizer=adam", "--lr=0.01"]
        self.compare("skip_backward_zeroed", 2, 2, flags,
                     reference_flags=flags + ["--batch_size=32"], reference_world=1)

    def test_every_worker_steps_without_backward(self):
        # Every worker calls step() without backward() at steps 3 and 9,
        # its .grad zeroed (not None): one process then still applies
        # momentum and weight decay with the zero gradient, and so must
        # the job; with .grad None it applies nothing. The reference is
        # one process of the global batch doing the same.
        # (idioms.py's SGD: momentum 0.9, nesterov, weight decay.)
        for name, flags in (("skip_all_zeroed", ["--skip_all=3,9", "--set_to_none=0"]),
                            ("skip_all_none", ["--skip_all=3,9"])):
            self.compare(name, 2, 2, flags, reference_flags=flags + ["--batch_size=32"],
                         reference_world=1)

    def test_a_workers_examples_are_the_rows_its_backward_ran_on(self):
        # Worker 1 takes 5 of its 16 rows each step: its gradient weighs
        # 5 against worker 0's 16, as one process of those 21 rows does,
        # however the loop calls the model: with keywords only (its rows
        # from the output), in eval() mode, or in two micro-batches of 3
        # and 2. And the chief's forward of 64 rows without a backward
        # (an evaluation left in training mode with gradients on) every 5
        # steps counts nothing. The reference is one process of the same
        # rows. (Not Adam at lr 0.01: with worker 1's 5 rows this net's
        # path under it is chaotic, 7e-9 from one process after a step,
        # 4e-6 after 10 and 0.03 after 25, the rows positional.)
        for name, flags in (("rows_kwargs", ["--short=1:5", "--call=kwargs"]),
                            ("rows_eval_mode", ["--short=1:5", "--train_mode=eval",
                                                "--optimizer=adagrad"]),
                            ("rows_micro_batches", ["--short=1:5", "--accumulate=no_sync"]),
                            ("rows_probe", ["--probe=5", "--clip=norm"])):
            self.compare(name, 2, 1, flags, reference_flags=flags + ["--batch_size=32"],
                         reference_world=1)

    def test_schedulers_on_each_workers_own_loss_are_said(self):
        # A ReduceLROnPlateau stepped on each worker's own loss: the
        # workers' lrs part (DDP's ranks would drift apart), a sync version
        # applies the lowest rank's, and each ps says so once. Every other
        # idiom here (torch's schedulers on the step count) is silent.
        ours, _ = self.pstrain("plateau_own", 2, 2, ["--scheduler=plateau_own"],
                               settings_differ=True)
        self.assertTrue(all(v.isfinite().all() for v in ours.values()))

    def test_a_worker_that_skips_backward_synchronizes_for_its_scaler(self):
        # Worker 0's loss overflows at step 5, where worker 1 skips its
        # backward: worker 1's opt.synchronize() before its GradScaler's
        # check gives it the average, so both skip the step (the next
        # batch merges into it) and both back the scale off, as one process
        # does with worker 0's rows.
        flags = ["--skip_backward=5,9", "--amp=scaler", "--overflow_steps=5",
                 "--overflow_rank=0", "--synchronize_skipped"]
        self.compare("skip_backward_scaler", 2, 2, flags, expect_updates=24,
                     reference_flags=flags + ["--batch_size=32"], reference_world=1)


if __name__ == "__main__":
    unittest.main()
