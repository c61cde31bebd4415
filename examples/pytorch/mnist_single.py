"""The seed's CNN on MNIST in one process: plain PyTorch, the script that
mnist.py turns into a pstrain worker (README.md shows the difference).

    python3 examples/pytorch/mnist_single.py --epochs=1
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position
from mnist_cnn import MnistCnn  # noqa: E402  pylint: disable=wrong-import-position


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data_dir", default="data/mnist")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_x, train_y = (t.to(args.device) for t in idx_data.load(args.data_dir, "train"))
    test_x, test_y = (t.to(args.device) for t in idx_data.load(args.data_dir, "t10k"))
    model = MnistCnn().to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for epoch in range(args.epochs):
        model.train()
        for idx in torch.randperm(len(train_x), device=args.device).split(args.batch_size):
            opt.zero_grad()
            loss = F.nll_loss(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step()
        accuracy, test_loss = idx_data.evaluate(model, test_x, test_y)
        print("epoch %d: test accuracy %.4f, test loss %.4f" % (epoch + 1, accuracy, test_loss))


if __name__ == "__main__":
    main()
