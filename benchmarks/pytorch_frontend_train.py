#!/usr/bin/env python3
"""The seed's CNN through pstrain.torch, as benchmarks/pytorch_frontend.sh
runs it against PyTorch DDP and the C++ worker: the very model, data path
and batches of benchmarks/pytorch_cpu_train.py (its MnistCnn and gather:
every step gathers and normalises its batch from the uint8 images), one
thread per worker, batch 128 per worker, SGD with momentum 0.5 at the job's
lr, the job's length from `pstrain launch --max_steps`; --forward_ahead=1
computes each step while the step before is in flight (async, ssp;
benchmarks/forward_ahead.sh).

  pstrain launch --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync \\
      --max_steps=235 -- python3 benchmarks/pytorch_frontend_train.py
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

import pstrain.torch as pst

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cpu_train import MnistCnn, evaluate, gather, load_split  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128, help="per worker")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--average_gradients", type=int, default=1,
                        help="0: each worker's own gradient to the ps, no average before step()")
    parser.add_argument("--forward_ahead", type=int, default=0,
                        help="1: DistributedOptimizer(forward_ahead=True) (async, ssp)")
    parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(__file__), "..",
                                                           "data", "mnist"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    pst.init()
    images, labels = load_split(args.data_dir, "train")
    model = MnistCnn()
    sampler = pst.DistributedSampler(len(labels), args.batch, seed=args.seed)
    opt = pst.DistributedOptimizer(model, optimizer="sgd", momentum=0.5, sampler=sampler,
                                   epochs=100, average_gradients=bool(args.average_gradients),
                                   forward_ahead=bool(args.forward_ahead))
    for epoch in range(opt.start_epoch, 100):
        if opt.done:
            break
        for idx in sampler.batches(epoch):
            x, y = gather(images, labels, idx)
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step(loss)
    if pst.is_chief():
        pst.log_metrics(test_accuracy=evaluate(model, *load_split(args.data_dir, "t10k")),
                        seconds=0)


if __name__ == "__main__":
    main()
