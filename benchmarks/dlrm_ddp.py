"""The DLRM example (examples/pytorch/dlrm.py) as a PyTorch DDP user runs
it: every rank holds every table (nn.EmbeddingBag, replicated), DDP with
gloo averages the gradients, sparse (sparse=True: the rows a batch touched,
as DDP allreduces sparse gradients) or dense (--dense: whole tables every
step). Each rank takes its --batch of every global batch, as a pstrain
worker does; rank 0 prints the samples/s of all ranks and the test AUC.

    python3 benchmarks/dlrm_ddp.py --data_dir=data/criteo_synth --world=2
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import dlrm  # noqa: E402  pylint: disable=wrong-import-position


def rank_main(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // args.world))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    with open(os.path.join(args.data_dir, "meta.json")) as f:
        meta = json.load(f)
    train, test = dlrm.load(args.data_dir, "train"), dlrm.load(args.data_dir, "test")
    import pstrain  # pylint: disable=import-outside-toplevel
    tables = []
    for field, n in enumerate(meta["cardinalities"]):
        e = torch.nn.EmbeddingBag(n, dlrm.DIM, mode="sum", sparse=not args.dense)
        with torch.no_grad():
            e.weight.copy_(torch.from_numpy(pstrain.embedding_initial_rows(
                np.arange(n), dlrm.DIM, args.seed, field, init_std=args.init_std)))
        tables.append(e)
    torch.manual_seed(args.seed)
    model = dlrm.DLRM(tables)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    table_params = [p for t in tables for p in t.parameters()]
    dense_params = list(model.bottom.parameters()) + list(model.top.parameters())
    opts = [torch.optim.Adagrad(table_params, lr=args.table_lr),
            torch.optim.Adagrad(dense_params, lr=args.lr)]
    global_batch = args.world * args.batch
    steps = train[0].shape[0] // global_batch
    if args.max_steps:
        steps = min(steps, args.max_steps)
    dist.barrier()
    t0 = time.time()
    for step, idx in enumerate(dlrm.batches(train[0].shape[0], global_batch, args.seed, 0)):
        if step >= steps:
            break
        idx = idx[rank * args.batch:(rank + 1) * args.batch]
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(ddp(train[0][idx], train[1][idx]),
                                                  train[2][idx])
        loss.backward()
        for o in opts:
            o.step()
    dist.barrier()
    seconds = time.time() - t0
    if rank == 0:
        auc = dlrm.evaluate(model, test)
        print("RESULT dlrm_ddp world=%d tables=%s batch=%d steps=%d seconds=%.2f "
              "samples_per_s=%.0f test_auc=%.4f" % (args.world, "dense" if args.dense else
                                                    "sparse", args.batch, steps, seconds,
                                                    steps * global_batch / seconds, auc),
              flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default="data/criteo_synth")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--max_steps", type=int, default=0)
    p.add_argument("--dense", action="store_true", help="dense table gradients (sparse=False)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--table_lr", type=float, default=0.05)
    p.add_argument("--init_std", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    import socket  # pylint: disable=import-outside-toplevel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
