#!/usr/bin/env python3
"""A model's training step, in one process or as a pstrain.torch worker, as
benchmarks/step_overhead.sh times them against each other, SGD lr 0.01
momentum 0.5, one thread, the same fixed batches of synthetic data each way
(the step, not the data, is measured):
  --model=mlp   an MLP of 59,635 parameters (784-75-10, 238 KB), batch 64
                of MNIST-shaped inputs: the step's fixed cost;
  --model=wide  one tensor of 11,200,000 parameters (44.8 MB, a
                ResNet-18's size) whose forward is one multiply-add pass:
                the step is the push, the update and the pull.

  python3 benchmarks/step_overhead_train.py --single --steps=600
  pstrain launch --cluster_spec=cluster_specs/local_1ps_1w.json --mode=sync \\
      --max_steps=600 -- python3 benchmarks/step_overhead_train.py

Prints one line: STEP_MS median=M p10=P steps=N (each step from zero_grad
to the end of step(), the first --warmup steps left out).
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


WIDE_FLOATS = 11_200_000


class Wide(nn.Module):
    """A ResNet-18's parameter count with next to no compute."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(WIDE_FLOATS))

    def forward(self, scale):
        return torch.dot(self.weight, scale)


def make_model(kind):
    if kind == "wide":
        return Wide()
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 75), nn.ReLU(), nn.Linear(75, 10))


def loss_of(model, kind, x, y):
    if kind == "wide":
        return model(x)
    return F.cross_entropy(model(x), y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", action="store_true", help="one process, torch.optim.SGD")
    parser.add_argument("--steps", type=int, default=600, help="--single: steps to run")
    parser.add_argument("--model", choices=("mlp", "wide"), default="mlp")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    if args.model == "wide":
        batches = [(torch.randn(WIDE_FLOATS), None) for _ in range(2)]
    else:
        batches = [(torch.randn(args.batch, 1, 28, 28), torch.randint(0, 10, (args.batch,)))
                   for _ in range(16)]
    model = make_model(args.model)
    if args.single:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        done = lambda: False  # noqa: E731
        steps = args.steps
    else:
        import pstrain.torch as pst
        pst.init()
        opt = pst.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.01,
                                                              momentum=0.5))
        done = lambda: opt.done  # noqa: E731
        steps = None
    times = []
    step = 0
    while not done() and (steps is None or step < steps):
        x, y = batches[step % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_of(model, args.model, x, y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        step += 1
    kept = sorted(times[args.warmup:]) or sorted(times)
    print("STEP_MS median=%.4f p10=%.4f steps=%d" % (
        statistics.median(kept), kept[len(kept) // 10], len(kept)), flush=True)


if __name__ == "__main__":
    main()
