#!/usr/bin/env python3
"""PyTorch training the seed's CNN on the CPU: the reference for pstrain's CPU worker.

  /usr/bin/python3 benchmarks/pytorch_cpu_train.py [--world_size=1|2] [--steps=N]

The same job as `pstrain launch` with the CPU model: mnist_cnn exactly as
models/net_spec.cc defines it, real MNIST from data/mnist (IDX, raw or gz,
read with numpy), MNIST's normalisation, batch 128 per process, SGD with
pstrain's defaults (lr 0.01 x processes, momentum 0.5), one thread per
process (torch.set_num_threads(1)).

  --world_size=1  one process: forward, backward, optimizer step.
  --world_size=2  DistributedDataParallel over gloo, one process per rank,
                  each its DistributedSampler share of every epoch (batch
                  128 per rank, gradients averaged: global batch 256).

Every step gathers and normalises its batch from the uint8 images, as a
pstrain worker does. The figure is images of all processes divided by the
time from the start of the first step to the end of the last (pstrain's
train_images_per_sec); the test-set evaluation at the end is outside it.

Prints one line (peak RSS: the largest of the ranks, from getrusage):
  RESULT bench=pytorch world_size=1 threads=1 steps=469 images_per_sec=N
      train_seconds=S test_accuracy=A peak_rss_mb=M
"""

import argparse
import gzip
import os
import resource
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch"))
from mnist_cnn import MnistCnn  # noqa: E402  pylint: disable=wrong-import-position

MEAN, STD = 0.1307, 0.3081  # dataset/mnist_dataset.h's Normalization


def read_idx(path):
    """An IDX file (raw, or path + '.gz') as a numpy uint8 array of its dims."""
    if not os.path.exists(path):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * d:8 + 4 * d], "big") for d in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(data_dir, prefix):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte"))
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


def gather(images_u8, labels, indices):
    """The batch as a worker's GatherBatch makes it: p / 255, - mean, / std."""
    x = images_u8[indices].unsqueeze(1).float().div_(255.0).sub_(MEAN).div_(STD)
    return x, labels[indices]


def evaluate(model, images_u8, labels):
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(labels), 1000):
            idx = torch.arange(start, min(start + 1000, len(labels)))
            x, y = gather(images_u8, labels, idx)
            correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(labels)


def batches(args, rank, world_size, num_examples):
    """(epoch, indices) for each of this rank's steps: DistributedSampler's
    share of a shuffled epoch, cut into batches of args.batch."""
    sampler = torch.utils.data.DistributedSampler(
        range(num_examples), num_replicas=world_size, rank=rank, shuffle=True,
        seed=args.seed, drop_last=False)
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(sampler)))
        for start in range(0, len(order), args.batch):
            if step == args.steps:
                return
            yield order[start:start + args.batch]
            step += 1
        epoch += 1


def train(rank, world_size, args, result_queue):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    if world_size > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}",
                                rank=rank, world_size=world_size)
    images, labels = load_split(args.data_dir, "train")
    model = MnistCnn()
    net = nn.parallel.DistributedDataParallel(model) if world_size > 1 else model
    lr = args.lr if args.lr > 0 else 0.01 * world_size
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=args.momentum)
    steps = list(batches(args, rank, world_size, len(labels)))
    if world_size > 1:
        dist.barrier()
    start = time.perf_counter()
    for indices in steps:
        x, y = gather(images, labels, indices)
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(net(x), y).backward()
        optimizer.step()
    if world_size > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    trained = sum(len(i) for i in steps)
    accuracy = evaluate(model, *load_split(args.data_dir, "t10k")) if rank == 0 else 0.0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result_queue.put((rank, trained, seconds, accuracy, rss_mb))
    if world_size > 1:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world_size", type=int, default=1)
    parser.add_argument("--steps", type=int, default=469, help="steps per process")
    parser.add_argument("--batch", type=int, default=128, help="per process")
    parser.add_argument("--lr", type=float, default=0.0, help="0: 0.01 x world_size")
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(__file__),
                                                           "..", "data", "mnist"))
    args = parser.parse_args()
    args.port = free_port()
    queue = mp.get_context("spawn").SimpleQueue()
    if args.world_size == 1:
        train(0, 1, args, queue)
    else:
        mp.spawn(train, args=(args.world_size, args, queue), nprocs=args.world_size)
    results = [queue.get() for _ in range(args.world_size)]
    images = sum(r[1] for r in results)
    seconds = max(r[2] for r in results)
    accuracy = next(r[3] for r in results if r[0] == 0)
    print(f"RESULT bench=pytorch world_size={args.world_size} threads=1 batch={args.batch} "
          f"steps={args.steps} images_per_sec={images / seconds:.0f} train_seconds={seconds:.2f} "
          f"test_accuracy={accuracy:.4f} peak_rss_mb={max(r[4] for r in results):.0f} "
          f"torch={torch.__version__}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
