"""Models at the edges of what pstrain.torch takes, five steps each:
TorchScript at the top level, a model built under torch.no_grad(), a
zero-size parameter (trained: there is nothing to send), and two that are
refused with what to do: a model on a device that is neither the CPU nor
CUDA (meta), and float16 parameters."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import pstrain.torch as pst


def make(kind):
    if kind == "script":
        return torch.jit.script(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    if kind == "no_grad":
        with torch.no_grad():
            return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if kind == "meta":
        return nn.Linear(4, 2, device="meta")
    if kind == "zero_size":
        model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
        model.register_parameter("empty", nn.Parameter(torch.zeros(0)))
        return model
    return nn.Linear(4, 2).half()  # "half"


def main():
    kind = sys.argv[1]
    pst.init()
    torch.manual_seed(0)
    model = make(kind)
    if kind == "no_grad":
        with torch.no_grad():
            opt = pst.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                           total_steps=5)
    else:
        opt = pst.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                       total_steps=5)
    while not opt.done:
        opt.zero_grad()
        F.mse_loss(model(torch.ones(3, 4)), torch.zeros(3, 2)).backward()
        opt.step()
    print("trained %s: %d steps" % (kind, opt.global_step))


if __name__ == "__main__":
    main()
