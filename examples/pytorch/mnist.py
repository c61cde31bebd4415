"""The seed's CNN on MNIST as a pstrain worker: mnist_single.py with the
few lines pstrain needs (README.md shows the difference). Every worker runs
it; the ps tasks hold the parameters and the optimizer.

    pstrain launch --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync \
        -- python3 examples/pytorch/mnist.py --epochs=1
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

import pstrain.torch as pst

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position
from mnist_cnn import MnistCnn  # noqa: E402  pylint: disable=wrong-import-position


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=None)  # None: the job's (by mode)
    parser.add_argument("--momentum", type=float, default=None)  # None: the job's (by mode)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data_dir", default="data/mnist")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    pst.init()
    torch.manual_seed(args.seed)
    train_x, train_y = (t.to(args.device) for t in idx_data.load(args.data_dir, "train"))
    test_x, test_y = (t.to(args.device) for t in idx_data.load(args.data_dir, "t10k"))
    model = MnistCnn().to(args.device)
    sampler = pst.DistributedSampler(len(train_x), args.batch_size, seed=args.seed,
                                     device=args.device)
    opt = pst.DistributedOptimizer(model, optimizer="sgd", lr=args.lr, momentum=args.momentum,
                                   sampler=sampler, epochs=args.epochs)
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
        print("epoch %d: test accuracy %.4f, test loss %.4f" % (epoch + 1, accuracy, test_loss))
        pst.log_metrics(test_accuracy=accuracy, test_loss=test_loss)


if __name__ == "__main__":
    main()
