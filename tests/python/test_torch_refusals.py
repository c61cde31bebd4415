"""What pstrain.torch refuses at once, saying what to write instead: an
idiom that cannot keep its meaning on the ps is never run with another.
These are refused when the optimizer is made, before the job is joined, so
the test runs in this process (a task of a 1-worker spec, no ps)."""

import os
import unittest

import pstrain_testing as t  # noqa: F401  (the package on sys.path)

os.environ["TF_CONFIG"] = ('{"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]}, '
                           '"task": {"type": "worker", "index": 0}}')
os.environ["PSTRAIN_INSECURE"] = "1"
os.environ["PSTRAIN_FLAGS"] = '["--mode=async"]'

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import pstrain.torch as pst  # noqa: E402
from pstrain.torch import _groups  # noqa: E402

pst.init()


class Refusals(unittest.TestCase):
    def refused(self, says, make):
        model = nn.Linear(4, 2)
        with self.assertRaises(pst.ConfigError) as e:
            make(model)
        self.assertIn(says, str(e.exception))
        print("RESULT torch_refusal %s" % str(e.exception).replace("\n", " "))

    def test_options_the_ps_cannot_run(self):
        self.refused("amsgrad=True is not something the ps runs",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.Adam(m.parameters(),
                                                                            amsgrad=True)))
        self.refused("dampening=0.5 is not something the ps runs",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.SGD(
                         m.parameters(), lr=0.1, momentum=0.9, dampening=0.5)))
        self.refused("maximize=True is not something the ps runs",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.SGD(
                         m.parameters(), lr=0.1, maximize=True)))
        self.refused("capturable=True is not something the ps runs",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.Adam(m.parameters(),
                                                                            capturable=True)))
        self.refused("differentiable=True is not something the ps runs",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.SGD(
                         m.parameters(), lr=0.1, differentiable=True)))
        self.refused("RMSprop: the ps tasks run torch.optim's SGD, Adam, AdamW and Adagrad",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.RMSprop(m.parameters())))
        self.refused("every parameter group must have the same initial_accumulator_value",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.Adagrad([
                         {"params": [m.weight], "initial_accumulator_value": 0.1},
                         {"params": [m.bias], "initial_accumulator_value": 0.2}])))

    def test_options_given_twice_or_meaning_nothing_here(self):
        self.refused("give the options to the torch.optim optimizer itself",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.SGD(m.parameters(), lr=0.1),
                                                        lr=0.2))
        self.refused("adam takes no option 'momentum' (it takes lr, betas, eps",
                     lambda m: pst.DistributedOptimizer(m, "adam", momentum=0.9))
        self.refused("average_gradients=True: the workers' average before step() is for sync "
                     "jobs", lambda m: pst.DistributedOptimizer(
                         m, torch.optim.SGD(m.parameters(), lr=0.1), average_gradients=True))
        self.refused("float32 parameters",
                     lambda m: pst.DistributedOptimizer(m.double(), torch.optim.SGD(
                         m.parameters(), lr=0.1)))

    def test_an_optimizer_whose_update_the_ps_would_not_run(self):
        # A subclass without a step() of its own is the class's update,
        # whatever torch.optim's profiler wrapped on its first instance.
        class Configured(torch.optim.Adagrad):
            def __init__(self, params):
                super().__init__(params, lr=0.05)

        self.assertEqual(_groups.kind_of(Configured(nn.Linear(4, 2).parameters())), "adagrad")

        class CentredAdam(torch.optim.Adam):
            def step(self, closure=None):  # gradient centralisation, then Adam
                return super().step(closure)

        self.refused("CentredAdam overrides Adam.step(): the ps tasks run Adam's own update",
                     lambda m: pst.DistributedOptimizer(m, CentredAdam(m.parameters())))
        self.refused("parameter bias is in the optimizer twice",
                     lambda m: pst.DistributedOptimizer(m, torch.optim.SGD(
                         [m.weight, m.bias, m.bias], lr=0.1)))

    def test_z_the_one_optimizer_a_process_makes(self):
        # (A process makes one DistributedOptimizer: this test, last.)
        # The usual resume: the torch optimizer, its scheduler, the wrapper,
        # then load_state_dict, which makes new group dicts in torch.optim.
        # The scheduler's groups must stay the ones each step reads.
        model = nn.Linear(4, 2)
        head = nn.Linear(2, 2)
        inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
        opt = pst.DistributedOptimizer(model, inner)
        opt.load_state_dict(inner.state_dict())
        sched.step()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.05)
        self.assertIs(opt.param_groups[0], inner.param_groups[0])
        # A group added later is refused.
        with self.assertRaises(pst.ConfigError) as e:
            opt.add_param_group({"params": list(head.parameters())})
        self.assertIn("put every parameter in a group when making it", str(e.exception))
        print("RESULT torch_refusal %s" % e.exception)


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    # Without a ps, the optimizer made above would try to join the job at
    # exit to leave it (pst.finish): skip that.
    os._exit(0 if result.wasSuccessful() else 1)  # pylint: disable=protected-access
