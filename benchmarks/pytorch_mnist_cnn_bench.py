#!/usr/bin/env python3
"""PyTorch's training throughput for the seed's CNN on one GPU.

The reference point for cuda_model_bench (pstrain's CUDA backend): the same
network, the same batch sizes, fp32 with TF32 off on both sides.

  python3 benchmarks/pytorch_mnist_cnn_bench.py [--batches=128,4096] [--device=cuda:0]

Ops, each in images per second, timed with CUDA events after a warm-up:
  forward_backward       zero_grad, forward, NLL loss, backward; batch and
                         gradients stay on the GPU.
  forward_backward_host  the same, plus what a pstrain worker's step also
                         does: the batch copied in from pinned host memory
                         and the gradients copied out, flattened, to pinned
                         host memory. The like-for-like figure for
                         cuda_model_bench's forward_backward.
  train_step             forward_backward plus the SGD update on the GPU
                         (lr 0.01, momentum 0.5, the seed's), i.e. training
                         in one process, for scale.

Before timing, each batch size is checked: a few SGD steps on one batch give
finite losses that go down, and finite, non-zero gradients.

Prints one line per result, as the C++ benchmarks:
  RESULT model=mnist_cnn backend=pytorch op=forward_backward batch=128 images_per_sec=N
"""

import argparse
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch"))
from mnist_cnn import MnistCnn  # noqa: E402  pylint: disable=wrong-import-position


def synthetic_batch(n, device, generator):
    """Images in MNIST's normalised range and random labels, as the C++ bench."""
    images = torch.rand(n, 1, 28, 28, generator=generator) * (2.8215 + 0.4242) - 0.4242
    labels = torch.randint(0, 10, (n,), generator=generator)
    return images.to(device), labels.to(device)


class Harness:
    """One model, optimizer and batch; the three ops as methods."""

    def __init__(self, n, device):
        generator = torch.Generator().manual_seed(11)
        torch.manual_seed(7)
        self.model = MnistCnn().to(device).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.5)
        self.images, self.labels = synthetic_batch(n, device, generator)
        self.host_images = self.images.cpu().pin_memory()
        self.host_labels = self.labels.cpu().pin_memory()
        count = sum(p.numel() for p in self.model.parameters())
        self.host_grads = torch.empty(count, pin_memory=True)
        self.device = device

    def forward_backward(self):
        self.optimizer.zero_grad(set_to_none=False)
        loss = F.nll_loss(self.model(self.images), self.labels)
        loss.backward()
        return loss

    def forward_backward_host(self):
        self.images.copy_(self.host_images, non_blocking=True)
        self.labels.copy_(self.host_labels, non_blocking=True)
        loss = self.forward_backward()
        flat = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()])
        self.host_grads.copy_(flat, non_blocking=True)
        return loss

    def train_step(self):
        loss = self.forward_backward()
        self.optimizer.step()
        return loss

    def eval_loss(self):
        self.model.eval()
        with torch.no_grad():
            loss = F.nll_loss(self.model(self.images), self.labels).item()
        self.model.train()
        return loss

    def check(self):
        """Raises unless 20 SGD steps on the batch lower its (dropout-free) loss."""
        before = self.eval_loss()
        losses = [self.train_step().item() for _ in range(20)]
        after = self.eval_loss()
        if not all(math.isfinite(x) for x in losses + [before, after]) or after >= before:
            raise RuntimeError(f"loss does not go down: {before} -> {after}")
        self.forward_backward_host()
        torch.cuda.synchronize(self.device)
        norm = self.host_grads.norm().item()
        if not math.isfinite(norm) or norm == 0:
            raise RuntimeError(f"gradient norm {norm}")


def images_per_sec(step, n, warmup, iters, repeats):
    """Median over `repeats` of n * iters / (CUDA-event time of iters steps)."""
    for _ in range(warmup):
        step()
    rates = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        rates.append(n * iters / (start.elapsed_time(end) / 1000.0))
    return statistics.median(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="128,4096", help="comma-separated batch sizes")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cudnn_benchmark", action="store_true",
                        help="let cuDNN time its algorithms (off: heuristics, as pstrain)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("pytorch_mnist_cnn_bench: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    # fp32 throughout, as pstrain's CUDA backend: no TF32 tensor cores.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    print(f"# torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name(device)}, cudnn.benchmark={args.cudnn_benchmark}")
    for n in (int(b) for b in args.batches.split(",")):
        harness = Harness(n, device)
        harness.check()
        # Fewer iterations for large batches: about the same time per op.
        iters = max(10, args.iters * 128 // n)
        for op in ("forward_backward", "forward_backward_host", "train_step"):
            rate = images_per_sec(getattr(harness, op), n, args.warmup, iters, args.repeats)
            print(f"RESULT model=mnist_cnn backend=pytorch op={op} batch={n} "
                  f"images_per_sec={round(rate)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
