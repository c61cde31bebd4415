"""A worker that fills an embedding table on the ps with fresh rows: each
step pulls ROWS ids never seen (bags of one), gives each a gradient and
pushes it, so every step makes ROWS new rows per worker. With --check the
chief reads back a sample of rows and compares them with what SGD must
have made of them (initial row - lr * the workers' average gradient). Run by
benchmarks/embedding_scale.sh."""

import argparse
import resource
import time

import torch

import pstrain
import pstrain.torch as pst


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--rows", type=int, default=32768, help="new rows a step, per worker")
    p.add_argument("--steps", type=int, default=160)
    args = p.parse_args()
    pst.init()
    emb = pst.Embedding(args.dim, num_embeddings=None, mode="sum", optimizer="sgd", lr=0.5,
                        init_std=0.01)
    head = torch.nn.Linear(args.dim, 1)
    opt = pst.DistributedOptimizer(head, torch.optim.SGD(head.parameters(), lr=0.0),
                                   total_steps=args.steps)
    n, r = pst.num_workers(), pst.rank()
    t0 = time.time()
    while not opt.done:
        step = opt.global_step
        first = (step * n + r) * args.rows
        ids = torch.arange(first, first + args.rows).reshape(-1, 1) * 7919  # spread, distinct
        opt.zero_grad(set_to_none=True)
        loss = emb(ids).sum()  # every row's gradient is ones
        loss.backward()
        opt.step(loss)
    seconds = time.time() - t0
    if pst.is_chief():
        sample = torch.arange(0, args.steps * n * args.rows, 99991) * 7919
        got = emb.read_rows(sample)
        want = torch.from_numpy(pstrain.embedding_initial_rows(
            sample.numpy(), args.dim, opt.seed, 0, init_std=0.01)) - 0.5 / n  # the average
        print("check: %d sampled rows, max |difference| %.3g"
              % (sample.numel(), float((got - want).abs().max())), flush=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT embedding_scale worker=%d rows_made=%d seconds=%.1f rows_per_s=%.0f "
          "peak_rss_mb=%.0f" % (r, args.steps * args.rows, seconds,
                                args.steps * args.rows / seconds, rss_mb), flush=True)


if __name__ == "__main__":
    main()
