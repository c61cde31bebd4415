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


def echo(value, data_dir):
    """Trains a few steps and returns `value`: what each of two concurrent
    calls must get back."""
    train(data_dir, 5)
    return value


def leave_early(data_dir):
    """Rank 1 returns after init without training (`if not
    pst.is_chief(): return`); the chief trains and would wait for it."""
    pst.init()
    if not pst.is_chief():
        return None
    return train(data_dir, 5)


def fail_once_then_lose_the_chief():
    """Rank 1 raises in its first attempt only; once its second has begun,
    the chief is killed (SIGKILL), in every attempt: what fails the job is
    the chief, not rank 1's earlier error."""
    import signal  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel
    pst.init()
    attempts = os.path.join(pst.run_dir(), "rank1_attempts")
    if pst.rank() == 1:
        with open(attempts, "a") as f:
            f.write("attempt\n")
        with open(attempts) as f:
            if len(f.readlines()) == 1:
                raise RuntimeError("a transient failure in rank 1's first attempt")
        time.sleep(120)  # until the launcher stops it
        return None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if os.path.exists(attempts):
            with open(attempts) as f:
                if len(f.readlines()) >= 2:
                    break
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
    return None


def leave_a_child(data_dir):
    """Starts a process that would outlive the task, trains, and returns
    its pid (the task's exit takes it along)."""
    import subprocess  # pylint: disable=import-outside-toplevel
    child = subprocess.Popen(["sleep", "171"])  # pylint: disable=consider-using-with
    train(data_dir, 3)
    return child.pid
