#!/usr/bin/env python3
"""PyTorch DDP to 99% MNIST test accuracy: the reference for --preset=mnist_99.

  /usr/bin/python3 benchmarks/pytorch_mnist99.py [--world_size=2] [--epochs=2]
      [--batch=64] [--lr=0.002] [--warmup_steps=50] [--eval_every_steps=100]

The preset's job in PyTorch, on the same cores: models/net_spec.cc's
cnn_large (the PyTorch MNIST example's net: conv 1->32 3x3, relu, conv
32->64 3x3, relu, max-pool 2, dropout 0.25, linear 9216->128, relu, dropout
0.5, linear 128->10, log-softmax), Adam (torch.optim.Adam, PyTorch's betas
and eps) with a linear warm-up and then a cosine schedule to 0 at the last
step (pstrain's --lr_schedule=cosine --warmup_steps), batch 64 per process,
DistributedDataParallel over gloo with one thread per process, real MNIST
read with numpy and normalised as a pstrain worker does.

Rank 0 evaluates the 10k test images every --eval_every_steps steps and at
the end; the other rank waits for it in its next all-reduce, so the
evaluations' time is left out of the training seconds, as pstrain's time
to 99% leaves the chief's out.

Prints one line:
  RESULT bench=pytorch_mnist99 world_size=2 epochs=2 steps=938 train_seconds=S
      images_per_sec=N final_test_accuracy=A seconds_to_98=T seconds_to_99=T
      (-1: not reached)
"""

import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_cpu_train import batches, evaluate, free_port, gather, load_split  # noqa: E402


class CnnLarge(nn.Module):
    """models/net_spec.cc's cnn_large, layer for layer."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.drop1 = nn.Dropout(0.25)
        self.fc1 = nn.Linear(9216, 128)
        self.drop2 = nn.Dropout(0.5)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(self.drop1(x).flatten(1)))
        return F.log_softmax(self.fc2(self.drop2(x)), dim=1)


def lr_at(args, step, total):
    """pstrain's common/lr_schedule: update t of W warm-up steps uses lr (t+1)/W,
    then cosine from lr to 0 over the remaining updates."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    t, span = step - args.warmup_steps, max(1, total - args.warmup_steps)
    return 0.5 * args.lr * (1 + math.cos(math.pi * t / span))


def train(rank, world_size, args, result_queue):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=rank, world_size=world_size)
    images, labels = load_split(args.data_dir, "train")
    test = load_split(args.data_dir, "t10k") if rank == 0 else None
    model = CnnLarge()
    net = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    steps = list(batches(args, rank, world_size, len(labels)))
    evals = []  # (training seconds, accuracy)
    paused = 0.0
    dist.barrier()
    start = time.perf_counter()
    for step, indices in enumerate(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(args, step, len(steps))
        x, y = gather(images, labels, indices)
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(net(x), y).backward()
        optimizer.step()
        last = step + 1 == len(steps)
        if rank == 0 and ((step + 1) % args.eval_every_steps == 0 or last):
            t0 = time.perf_counter()
            accuracy = evaluate(model, *test)
            evals.append((t0 - start - paused, accuracy))
            paused += time.perf_counter() - t0
    dist.barrier()
    seconds = time.perf_counter() - start - paused
    if rank == 0:
        result_queue.put((sum(len(i) for i in steps) * world_size, seconds, evals))
    dist.destroy_process_group()


def first_at(evals, target):
    for seconds, accuracy in evals:
        if accuracy >= target:
            return seconds
    return -1.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world_size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="per process")
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--warmup_steps", type=int, default=50)
    parser.add_argument("--eval_every_steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(__file__),
                                                           "..", "data", "mnist"))
    args = parser.parse_args()
    per_epoch = math.ceil(60000 / (args.batch * args.world_size))
    args.steps = args.epochs * per_epoch
    args.port = free_port()
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(train, args=(args.world_size, args, queue), nprocs=args.world_size, join=True)
    images, seconds, evals = queue.get()
    print(f"RESULT bench=pytorch_mnist99 world_size={args.world_size} epochs={args.epochs} "
          f"steps={args.steps} train_seconds={seconds:.1f} images_per_sec={images / seconds:.0f} "
          f"final_test_accuracy={evals[-1][1]:.4f} seconds_to_98={first_at(evals, 0.98):.1f} "
          f"seconds_to_99={first_at(evals, 0.99):.1f}")
    for seconds_at, accuracy in evals:
        print(f"EVAL seconds={seconds_at:.1f} accuracy={accuracy:.4f}")


if __name__ == "__main__":
    main()
