"""The training script of the pstrain.torch tests: a small network on real
MNIST through pstrain.torch, or (--reference) in one plain PyTorch process
with torch.optim over the same data order. Options pick what a test needs."""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position
from mnist_cnn import MnistCnn  # noqa: E402  pylint: disable=wrong-import-position

import pstrain  # noqa: E402  pylint: disable=wrong-import-position
import pstrain.torch as pst  # noqa: E402  pylint: disable=wrong-import-position


class BnNet(nn.Module):
    """Convolutions with BatchNorm: buffers that are not parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return F.log_softmax(self.fc(x.flatten(1)), dim=1)


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def global_batches(args, num_examples):
    """The job's global batches in its order, args.steps of them (0: the
    epochs')."""
    sampler = pst.DistributedSampler(num_examples, args.batch_size, seed=args.seed,
                                     num_workers=1, rank=0, device=args.device)
    step = 0
    for epoch in range(args.epochs):
        for idx in sampler.batches(epoch):
            if step == args.steps > 0:
                return
            yield idx
            step += 1


def reference(args, model, train_x, train_y):
    """One process, torch.optim.SGD, each global batch of the job's order."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for idx in global_batches(args, len(train_x)):
        opt.zero_grad()
        F.nll_loss(model(train_x[idx]), train_y[idx]).backward()
        opt.step()


def reference_ahead(args, model, train_x, train_y):
    """One process computing ahead as a forward_ahead worker alone does:
    step k's gradient on the parameters before step k - 1's update (step
    0's and 1's on the initial ones), applied by torch.optim.SGD."""
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    shadow = MnistCnn(dropout=args.dropout).to(args.device)
    before = [p.detach().clone() for p in model.parameters()]  # the model one update ago
    for idx in global_batches(args, len(train_x)):
        with torch.no_grad():
            for s, b in zip(shadow.parameters(), before):
                s.copy_(b)
            before = [p.detach().clone() for p in model.parameters()]
        shadow.zero_grad()
        F.nll_loss(shadow(train_x[idx]), train_y[idx]).backward()
        for p, s in zip(model.parameters(), shadow.parameters()):
            p.grad = s.grad.clone()
        opt.step()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", required=True)
    p.add_argument("--model", default="cnn", choices=["cnn", "bn"])
    p.add_argument("--dropout", action="store_true")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: the epochs)")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--reference", action="store_true", help="one plain PyTorch process")
    p.add_argument("--out", default="", help="reference: write the flat parameters here")
    p.add_argument("--initial", action="store_true", help="reference: no step, the initial weights")
    p.add_argument("--dump_dir", default="", help="each rank writes its state_dict here")
    p.add_argument("--raise_at_step", type=int, default=-1)
    p.add_argument("--raise_on_rank", type=int, default=1)
    p.add_argument("--wider_on_rank", type=int, default=-1, help="this rank's fc1 has 51 outputs")
    p.add_argument("--evaluate", action="store_true", help="the chief evaluates each epoch")
    p.add_argument("--adam_momentum", action="store_true", help="give adam sgd's momentum")
    p.add_argument("--device", default="cpu")
    p.add_argument("--forward_ahead", action="store_true",
                   help="DistributedOptimizer(forward_ahead=True); with --reference, one "
                        "process computing ahead as one such worker does")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    if args.device.startswith("cuda"):
        # Full float32 arithmetic, the same algorithm every time: TF32
        # (PyTorch's default for convolutions on Ampere and later) rounds
        # to 10 bits, far above the golden run's tolerance.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    train_x, train_y = (x.to(args.device) for x in idx_data.load(args.data_dir, "train"))
    if args.reference:
        model = MnistCnn(dropout=args.dropout).to(args.device)
        if not args.initial:
            (reference_ahead if args.forward_ahead else reference)(args, model, train_x, train_y)
        flat_params(model.cpu()).tofile(args.out)
        return

    pst.init()
    if args.model == "bn":
        model = BnNet()
    else:
        fc1_out = 51 if pst.rank() == args.wider_on_rank else 50
        model = MnistCnn(dropout=args.dropout, fc1_out=fc1_out)
    model = model.to(args.device)
    sampler = pst.DistributedSampler(len(train_x), args.batch_size, seed=args.seed,
                                     device=args.device)
    options = {"momentum": args.momentum} if args.optimizer == "sgd" or args.adam_momentum else {}
    opt = pst.DistributedOptimizer(model, optimizer=args.optimizer, lr=args.lr, sampler=sampler,
                                   epochs=args.epochs,
                                   total_steps=args.steps if args.steps > 0 else None,
                                   forward_ahead=args.forward_ahead, **options)
    test = None
    if pst.is_chief() and args.evaluate:
        test = [x.to(args.device) for x in idx_data.load(args.data_dir, "t10k")]
    for epoch in range(opt.start_epoch, args.epochs):
        model.train()
        for idx in sampler.batches(epoch):
            if opt.global_step == args.raise_at_step and pst.rank() == args.raise_on_rank:
                raise RuntimeError("a bug in the user's script at step %d" % opt.global_step)
            opt.zero_grad()
            loss = F.nll_loss(model(train_x[idx]), train_y[idx])
            loss.backward()
            opt.step(loss)
        if test is not None:
            accuracy, test_loss = idx_data.evaluate(model, *test)
            print("epoch %d: test accuracy %.4f" % (epoch + 1, accuracy))
            pst.log_metrics(test_accuracy=accuracy, test_loss=test_loss)
    if args.dump_dir:
        pst.finish()
        torch.save(model.cpu().state_dict(), os.path.join(args.dump_dir, "rank%d.pt" % pst.rank()))


if __name__ == "__main__":
    main()
