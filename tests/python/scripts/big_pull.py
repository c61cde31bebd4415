"""One forward of pst.Embedding that pulls --ids distinct rows of --dim
floats at once, then a step: with a small --max_message_mb the rows'
answer is over what a task takes in one message, and the ps refuses the
pull, saying so (the test: test_torch_embedding's Refusals)."""

import argparse

import torch

import pstrain.torch as pst


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ids", type=int, default=8192)
    p.add_argument("--dim", type=int, default=64)
    args = p.parse_args()
    pst.init()
    emb = pst.Embedding(embedding_dim=args.dim, name="wide")
    head = torch.nn.Linear(args.dim, 1)
    opt = pst.DistributedOptimizer(head, torch.optim.SGD(head.parameters(), lr=0.1))
    loss = head(emb(torch.arange(args.ids).reshape(args.ids, 1))).sum()
    loss.backward()
    opt.step(loss=loss)
    opt.finish()


if __name__ == "__main__":
    main()
