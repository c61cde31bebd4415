"""Functions that tests/python/test_run_fn.py runs with pstrain.runner.run:
defined in a module, so that they travel by reference (plain pickle)."""

import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position

import pstrain.torch as pst  # noqa: E402  pylint: disable=wrong-import-position


def train(data_dir, steps, lr=0.1):
    """A linear model on MNIST's test images for `steps` steps; the chief
    logs its accuracy. Returns {"rank", "num_workers", "accuracy"}."""
    pst.init()
    torch.manual_seed(1)
    x, y = idx_data.load(data_dir, "t10k")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10),
                                torch.nn.LogSoftmax(dim=1))
    sampler = pst.DistributedSampler(len(x), 32, seed=1)
    opt = pst.DistributedOptimizer(model, optimizer="sgd", lr=lr, sampler=sampler,
                                   total_steps=steps)
    for idx in sampler.batches(0):
        opt.zero_grad()
        loss = F.nll_loss(model(x[idx]), y[idx])
        loss.backward()
        opt.step(loss)
    accuracy = None
    if pst.is_chief():
        accuracy, test_loss = idx_data.evaluate(model, x, y)
        print("accuracy %.4f after %d steps" % (accuracy, steps))
        pst.log_metrics(test_accuracy=accuracy, test_loss=test_loss)
    return {"rank": pst.rank(), "num_workers": pst.num_workers(), "accuracy": accuracy}


def fail_at_rank(bad_rank, data_dir):
    """Raises in rank `bad_rank` once it has joined; the others train."""
    pst.init()
    if pst.rank() == bad_rank:
        raise ValueError("a bug in the user's function at rank %d" % pst.rank())
    return train(data_dir, 20)


def never_init():
    """Returns without joining the job."""
    return 1
