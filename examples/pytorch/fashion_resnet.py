"""A small residual network with BatchNorm on Fashion-MNIST, a network the
C++ models cannot express, trained by pstrain's ps tasks: SGD with Nesterov
momentum and weight decay, a linear warm-up and a cosine schedule, all
applied on the ps.

    tools/fetch_fashion_mnist.sh
    pstrain launch --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync \\
        -- python3 examples/pytorch/fashion_resnet.py --epochs=2

BatchNorm's running statistics are not parameters: each worker keeps its
own (pstrain.torch's docstring says why); the chief evaluates with its own.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import pstrain.torch as pst

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position


class Block(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a shortcut (He et al. 2016)."""

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
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    """28x28 -> 16 channels -> blocks of 16, 32 (stride 2), 64 (stride 2)
    channels -> global average pool -> 10 classes."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return F.log_softmax(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), dim=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data_dir", default="data/fashion_mnist")
    args = parser.parse_args()

    pst.init()
    torch.manual_seed(args.seed)
    train_x, train_y = idx_data.load(args.data_dir, "train", "fashion_mnist")
    test_x, test_y = idx_data.load(args.data_dir, "t10k", "fashion_mnist")
    model = ResNet()
    sampler = pst.DistributedSampler(len(train_x), args.batch_size, seed=args.seed)
    opt = pst.DistributedOptimizer(model, optimizer="sgd", lr=args.lr, momentum=0.9,
                                   nesterov=True, weight_decay=5e-4, lr_schedule="cosine",
                                   warmup_steps=100, sampler=sampler, epochs=args.epochs)
    start = time.monotonic()
    for epoch in range(opt.start_epoch, args.epochs):
        model.train()
        for idx in sampler.batches(epoch):
            opt.zero_grad()
            loss = F.nll_loss(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step(loss)
        if not pst.is_chief():
            continue
        accuracy, test_loss = idx_data.evaluate(model, test_x, test_y)
        print("epoch %d: test accuracy %.4f, test loss %.4f, %.0f s"
              % (epoch + 1, accuracy, test_loss, time.monotonic() - start))
        pst.log_metrics(test_accuracy=accuracy, test_loss=test_loss)


if __name__ == "__main__":
    main()
