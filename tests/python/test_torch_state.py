"""A user's own checkpoint of model and optimizer (torch.save of
model.state_dict() and opt.state_dict()) through pstrain.torch: the
optimizer's state_dict is torch.optim's, with the values the ps holds (a
one-process run's and pstrain's are the same to rounding), and a new job
that loads one (into the wrapper after making it, or into the torch
optimizer before wrapping it) goes on exactly as one process that loads
it does."""

import os
import unittest

import torch

import idioms_testing as it


class UsersOwnCheckpoint(it.IdiomCase):
    def first_half(self, optimizer):
        flags = ["--optimizer=" + optimizer, "--lr=0.01", "--groups", "--branch", "--steps=12"]
        ours_path = os.path.join(self.dir, "ours_%s.ckpt" % optimizer)
        theirs_path = os.path.join(self.dir, "theirs_%s.ckpt" % optimizer)
        self.pstrain("first_" + optimizer, 1, 2, flags + ["--save=" + ours_path])
        self.reference("first_" + optimizer, 1, flags + ["--save=" + theirs_path])
        return torch.load(ours_path), torch.load(theirs_path)

    def test_state_dict_is_torch_optims_with_the_ps_values(self):
        for optimizer in ("adam", "sgd", "adagrad"):
            ours, theirs = self.first_half(optimizer)
            self.assertLess(it.max_difference(ours["model"], theirs["model"]), it.TOLERANCE)
            a, b = ours["opt"], theirs["opt"]
            self.assertEqual(a["param_groups"], b["param_groups"])
            # The branch's other head never had a gradient in 12 steps of
            # this one: no state, in both.
            self.assertEqual(sorted(a["state"]), sorted(b["state"]), optimizer)
            for index, state in b["state"].items():
                self.assertEqual(sorted(a["state"][index]), sorted(state))
                for key, value in state.items():
                    if value is None:
                        self.assertIsNone(a["state"][index][key])
                        continue
                    mine = a["state"][index][key]
                    self.assertLess(float((mine.double() - value.double()).abs().max()),
                                    it.TOLERANCE, (optimizer, index, key))
            print("RESULT torch_idioms state_dict_%s entries=%d" % (optimizer, len(a["state"])))

    def test_a_new_job_goes_on_from_a_checkpoint_as_one_process_does(self):
        _, theirs = self.first_half("adam")
        path = os.path.join(self.dir, "one_process.ckpt")
        torch.save(theirs, path)
        second = ["--optimizer=adam", "--lr=0.01", "--groups", "--branch", "--start=12",
                  "--steps=13", "--load=" + path]
        self.compare("second_half_wrapper", 1, 2, second)
        self.compare("second_half_inner", 1, 2, second + ["--load_into=inner"],
                     reference_flags=second)
        self.compare("second_half_ddp", 2, 2, second)
        # Without the optimizer's state the job ends elsewhere: the state
        # mattered.
        ours, _ = self.pstrain("no_state", 1, 2, second[:-1] + ["--load=" + self.strip(path)])
        theirs_end = self.reference("second_half_again", 1, second)
        self.assertGreater(it.max_difference(ours, theirs_end), 1e-4)

    def strip(self, path):
        """The checkpoint with a fresh optimizer's state."""
        ck = torch.load(path)
        ck["opt"]["state"] = {}
        out = path + ".fresh"
        torch.save(ck, out)
        return out


if __name__ == "__main__":
    unittest.main()
