#!/usr/bin/env python3
"""A model's training step, in one process or as a pstrain.torch worker, as
benchmarks/step_overhead.sh times them against each other, SGD lr 0.01
momentum 0.5, one thread, the same fixed batches of synthetic data each way
(the step, not the data, is measured):
  --model=mlp   an MLP of 59,635 parameters (784-75-10, 238 KB), batch 64
                of MNIST-shaped inputs: the step's fixed cost;
  --model=wide  one tensor of 11,200,000 parameters (44.8 MB, a
                ResNet-18's size) whose forward is one multiply-add pass:
                the step is the push, the update and the pull;
  --model=resnet18  the CIFAR ResNet-18 (11,173,962 parameters, BatchNorm)
                at batch 128 of CIFAR-shaped inputs: a GPU user's model.
--device=cuda runs it on the GPU (each step's end synchronised before it is
timed); --forward_ahead computes each step while the step before is in
flight (async, ssp); --idle_ms (one process) sleeps that long between
steps, as a worker waits for its ps; --count prints the model's parameter
count and exits.

  python3 benchmarks/step_overhead_train.py --single --steps=600
  pstrain launch --cluster_spec=cluster_specs/local_1ps_1w.json --mode=sync \\
      --max_steps=600 -- python3 benchmarks/step_overhead_train.py

Prints one line: STEP_MS median=M p10=P steps=N zero_grad=Z forward=F
backward=B step=S (each step from zero_grad to the end of step(), the
first --warmup steps left out; Z, F, B, S: the medians of its phases, ms;
on a GPU the host's time in each, the GPU's work showing in step()'s,
which waits for it).
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


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """He et al.'s ResNet-18 in its CIFAR form (3x3 stem, no max pool)."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU())
        layers, cin = [], 64
        for cout, stride in ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1),
                             (512, 2), (512, 1)):
            layers.append(BasicBlock(cin, cout, stride))
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(kind):
    if kind == "wide":
        return Wide()
    if kind == "resnet18":
        return ResNet18()
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 75), nn.ReLU(), nn.Linear(75, 10))


def loss_of(model, kind, x, y):
    if kind == "wide":
        return model(x)
    return F.cross_entropy(model(x), y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", action="store_true", help="one process, torch.optim.SGD")
    parser.add_argument("--steps", type=int, default=600, help="--single: steps to run")
    parser.add_argument("--model", choices=("mlp", "wide", "resnet18"), default="mlp")
    parser.add_argument("--batch", type=int, default=None, help="mlp 64, resnet18 128")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--count", action="store_true", help="print the parameter count")
    parser.add_argument("--idle_ms", type=float, default=0.0,
                        help="sleep this long after each step, untimed (with --single: a "
                             "worker's wait for its ps, without the ps)")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--forward_ahead", action="store_true",
                        help="DistributedOptimizer(forward_ahead=True) (async, ssp)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = make_model(args.model)
    if args.count:
        print(sum(p.numel() for p in model.parameters()))
        return
    device = torch.device(args.device)
    model.to(device)
    batch = args.batch or (128 if args.model == "resnet18" else 64)
    if args.model == "wide":
        batches = [(torch.randn(WIDE_FLOATS), None) for _ in range(2)]
    elif args.model == "resnet18":
        batches = [(torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,)))
                   for _ in range(4)]
    else:
        batches = [(torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,)))
                   for _ in range(16)]
    batches = [(x.to(device), y.to(device) if y is not None else None) for x, y in batches]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if args.single:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        done = lambda: False  # noqa: E731
        steps = args.steps
    else:
        import pstrain.torch as pst
        pst.init()
        opt = pst.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.01,
                                                              momentum=0.5),
                                       forward_ahead=args.forward_ahead)
        done = lambda: opt.done  # noqa: E731
        steps = None
    times, phases = [], []
    clock = time.perf_counter
    step = 0
    while not done() and (steps is None or step < steps):
        x, y = batches[step % len(batches)]
        t0 = clock()
        opt.zero_grad()
        t1 = clock()
        loss = loss_of(model, args.model, x, y)
        t2 = clock()
        loss.backward()
        t3 = clock()
        opt.step()
        sync()
        t4 = clock()
        times.append((t4 - t0) * 1e3)
        phases.append(((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3))
        step += 1
        if args.idle_ms > 0:
            time.sleep(args.idle_ms / 1e3)
    kept = sorted(times[args.warmup:]) or sorted(times)
    phases = phases[args.warmup:] or phases
    medians = [statistics.median(p[k] for p in phases) for k in range(4)]
    print("STEP_MS median=%.4f p10=%.4f steps=%d zero_grad=%.4f forward=%.4f backward=%.4f "
          "step=%.4f" % ((statistics.median(kept), kept[len(kept) // 10], len(kept)) +
                         tuple(medians)), flush=True)


if __name__ == "__main__":
    main()
