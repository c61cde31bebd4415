"""Everyday PyTorch idioms through pstrain.torch with one worker end where
the same loop ends in one process with torch.optim (to float rounding,
after 25 steps; tests/python/scripts/idioms.py has the loop): a branch
used on some steps with zero_grad(set_to_none=True and False), clipping by
norm and by value, parameter groups with their own options under torch's
schedulers, a parameter frozen and then unfrozen, tied weights (every
run), bf16 autocast, GradScaler's skipped steps, gradient accumulation,
.grad replaced by views of other parameters' or of itself; batches of
10 and 100 rows, bit for bit.
Each through 2 ps (tensors cut between shards)."""

import unittest

import idioms_testing as it


class OneWorkerIsOneProcess(it.IdiomCase):
    def test_a_branch_used_on_some_steps_with_set_to_none(self):
        # torch.optim leaves a parameter whose .grad is None alone: no
        # momentum, no weight decay (SGD with both here).
        self.compare("branch_none", 1, 2, ["--branch", "--set_to_none=1"])

    def test_a_branch_used_on_some_steps_with_zeroed_gradients(self):
        self.compare("branch_zero", 1, 2, ["--branch", "--set_to_none=0", "--optimizer=adam",
                                           "--lr=0.01"])

    def test_batches_that_are_not_a_power_of_two(self):
        # The ps's average of one worker's push is the gradient itself
        # (examples x gradient / examples would round): bit for bit.
        for batch in (10, 100):
            difference = self.compare("batch_%d" % batch, 1, 2,
                                      ["--batch_size=%d" % batch, "--set_to_none=0"])
            self.assertEqual(difference, 0.0, "batch %d" % batch)

    def test_clipping_between_backward_and_step(self):
        self.compare("clip_norm", 1, 2, ["--clip=norm"])
        self.compare("clip_value", 1, 2, ["--clip=value", "--optimizer=adamw", "--lr=0.01"])

    def test_groups_under_schedulers_and_a_parameter_unfrozen_midway(self):
        self.compare("adamw_groups_onecycle", 1, 2, ["--optimizer=adamw", "--groups",
                                                     "--scheduler=onecycle", "--lr=0.01"])
        self.compare("adam_unfreeze_lambda", 1, 2, ["--optimizer=adam", "--unfreeze_at=10",
                                                    "--scheduler=lambda", "--lr=0.01"])
        self.compare("adagrad_groups_cosine", 1, 2, ["--optimizer=adagrad", "--groups",
                                                     "--scheduler=cosine"])
        self.compare("sgd_groups_warmup_linear", 1, 2, ["--groups",
                                                        "--scheduler=warmup_linear"])

    def test_mixed_precision(self):
        self.compare("bf16", 1, 2, ["--amp=bf16", "--optimizer=adamw", "--clip=norm",
                                    "--scheduler=warmup_linear", "--lr=0.01"])
        self.compare("bf16_sgd", 1, 2, ["--amp=bf16"])
        # Two overflowing steps are skipped, as GradScaler skips them: 23
        # updates of 25 steps, the scale backed off twice.
        self.compare("scaler", 1, 2, ["--amp=scaler", "--clip=norm"], expect_updates=23)

    def test_gradient_accumulation(self):
        self.compare("two_passes", 1, 2, ["--accumulate=passes", "--optimizer=adam",
                                          "--lr=0.01"])
        self.compare("no_sync", 1, 2, ["--accumulate=no_sync"])

    def test_gradients_replaced_by_views_of_the_flat_buffer(self):
        # .grad as torch.optim reads it: a transposed view of itself (the
        # same address and shape, other strides), and two parameters'
        # .grad exchanged (each read before either is written).
        self.compare("grad_transpose", 1, 2, ["--grad_edit=transpose", "--set_to_none=0"])
        self.compare("grad_swap", 1, 2, ["--grad_edit=swap", "--set_to_none=0", "--optimizer=adam",
                                         "--lr=0.01"])

    def test_the_comparison_can_fail(self):
        # The same loop without its clipping in one of the runs ends
        # elsewhere: the tolerance tells the idioms apart.
        ours, _ = self.pstrain("clip_only_here", 1, 2, ["--clip=norm"])
        theirs = self.reference("clip_only_here", 1, [])
        self.assertGreater(it.max_difference(ours, theirs), 1e-3)


if __name__ == "__main__":
    unittest.main()
