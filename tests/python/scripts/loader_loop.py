"""A user's own loop over a DataLoader with a distributed sampler, epochs
by set_epoch, as DDP scripts are written; rank --fail_rank raises at the
job's step --fail_at in its first life (its run directory keeps a mark),
so that `pstrain launch` restarts it. With --sampler=resumable
(pst.ResumableSampler) the restarted worker's loop skips what the job has
done; with --sampler=torch (torch's DistributedSampler) it starts over.
The chief writes the final parameters to --out."""

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position

import pstrain.torch as pst  # noqa: E402  pylint: disable=wrong-import-position


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", required=True)
    p.add_argument("--sampler", default="resumable", choices=["resumable", "torch"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--fail_rank", type=int, default=-1)
    p.add_argument("--fail_at", type=int, default=-1)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    pst.init()
    x, y = idx_data.load(args.data_dir, "train")
    data = torch.utils.data.TensorDataset(x[:2048].flatten(1), y[:2048])
    if args.sampler == "resumable":
        sampler = pst.ResumableSampler(data, batch_size=args.batch_size, seed=3)
    else:
        sampler = torch.utils.data.distributed.DistributedSampler(
            data, num_replicas=pst.num_workers(), rank=pst.rank(), seed=3)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = pst.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.05,
                                                          momentum=0.9))
    mark = os.path.join(pst.run_dir(), "failed-once-%d" % pst.rank())
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if (pst.rank() == args.fail_rank and opt.global_step == args.fail_at
                    and not os.path.exists(mark)):
                open(mark, "w").close()
                raise RuntimeError("a failure at step %d" % opt.global_step)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    pst.finish()
    if pst.is_chief() and args.out:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
