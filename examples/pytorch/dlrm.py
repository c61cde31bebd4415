"""A DLRM-style click model (Naumov et al., 2019, "Deep learning
recommendation model for personalization and recommendation systems") on
Criteo-shaped data (tools/criteo_synth.py), with its 26 embedding tables
on the ps as pst.Embedding and the dense part (bottom and top MLPs)
trained by the DistributedOptimizer.

    python3 tools/criteo_synth.py --out data/criteo_synth --scale=0.01 --train=400000 --test=50000
    build/bin/pstrain launch --cluster_spec=cluster_specs/local_2ps_2w.json --mode=sync \\
        -- python3 examples/pytorch/dlrm.py --data_dir=data/criteo_synth
    python3 examples/pytorch/dlrm.py --data_dir=data/criteo_synth --single --world=2

--single runs the same model in one process, the tables as
nn.EmbeddingBag(sparse=True) starting from the same rows, with --world
times the batch: what N sync workers compute. The test AUC is logged as
the job's test accuracy (evals.csv, summary.json's final_test_accuracy),
and printed with the data's best reachable AUC (meta.json).

The model: dense features log1p'd through the bottom MLP (13 -> 64 -> 16);
each categorical field's row (16 floats); the dot products of every pair
of those 27 vectors, with the bottom MLP's output, through the top MLP
(367 -> 64 -> 1). Tables: Adagrad (lr --table_lr) with nn.Embedding's
initial rows scaled by --init_std; dense: Adagrad too (lr --lr).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import criteo_synth  # noqa: E402  pylint: disable=wrong-import-position

try:
    import pstrain  # noqa: F401  (an installed package, or under pstrain launch)
except ImportError:  # run from a checkout: its build's package
    sys.path.insert(0, os.path.join(HERE, "..", "..", "build", "python"))

DIM = 16


class DLRM(torch.nn.Module):
    def __init__(self, tables, lookup=None):
        """`lookup`: reads every table at once (pst.EmbeddingBagCollection:
        one request to each ps a forward); None: each table in turn."""
        super().__init__()
        self.tables = torch.nn.ModuleList(tables)
        self.lookup = lookup
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ReLU(),
                                          torch.nn.Linear(64, DIM), torch.nn.ReLU())
        n = len(tables) + 1
        self.top = torch.nn.Sequential(torch.nn.Linear(DIM + n * (n - 1) // 2, 64),
                                       torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.pairs = torch.triu_indices(n, n, offset=1)

    def forward(self, dense, sparse):
        x = self.bottom(torch.log1p(dense))
        bags = [sparse[:, f:f + 1] for f in range(len(self.tables))]
        if self.lookup is not None:
            vectors = [x] + self.lookup(bags)
        else:
            vectors = [x] + [t(b) for t, b in zip(self.tables, bags)]
        v = torch.stack(vectors, dim=1)                       # (B, 27, DIM)
        dots = torch.bmm(v, v.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def load(data_dir, split):
    path = os.path.join(data_dir, split + ".npz")
    if not os.path.exists(path):
        sys.exit("dlrm.py: no %s: make the data first, e.g. python3 tools/criteo_synth.py "
                 "--out %s --scale=0.01 --train=400000 --test=50000" % (path, data_dir))
    with np.load(path) as z:
        return (torch.from_numpy(z["dense"]), torch.from_numpy(z["sparse"]),
                torch.from_numpy(z["label"]))


def evaluate(model, test, batch=8192):
    model.eval()
    scores = []
    with torch.no_grad():
        for i in range(0, test[0].shape[0], batch):
            scores.append(torch.sigmoid(model(test[0][i:i + batch], test[1][i:i + batch])))
    model.train()
    return criteo_synth.auc(test[2].numpy(), torch.cat(scores).numpy())


def batches(n, global_batch, seed, epoch):
    """The global batches of an epoch: a permutation of the data by (seed, epoch)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    for s in range(n // global_batch):
        yield order[s * global_batch:(s + 1) * global_batch]


def single(args, meta, train, test):
    import pstrain  # pylint: disable=import-outside-toplevel
    tables = []
    for f, n in enumerate(meta["cardinalities"]):
        e = torch.nn.EmbeddingBag(n, DIM, mode="sum", sparse=True)
        with torch.no_grad():
            e.weight.copy_(torch.from_numpy(pstrain.embedding_initial_rows(
                np.arange(n), DIM, args.seed, f, init_std=args.init_std)))
        tables.append(e)
    torch.manual_seed(args.seed)
    model = DLRM(tables)
    sparse_opt = torch.optim.Adagrad([p for t in tables for p in t.parameters()], lr=args.table_lr)
    dense_opt = torch.optim.Adagrad(list(model.bottom.parameters()) + list(model.top.parameters()),
                                    lr=args.lr)
    global_batch = args.world * args.batch
    t0, samples = time.time(), 0
    for epoch in range(args.epochs):
        for step, idx in enumerate(batches(train[0].shape[0], global_batch, args.seed, epoch)):
            if args.max_steps and step >= args.max_steps:
                break
            sparse_opt.zero_grad(set_to_none=True)
            dense_opt.zero_grad(set_to_none=True)
            loss = F.binary_cross_entropy_with_logits(model(train[0][idx], train[1][idx]),
                                                      train[2][idx])
            loss.backward()
            sparse_opt.step()
            dense_opt.step()
            samples += global_batch
    seconds = time.time() - t0
    auc = evaluate(model, test)
    print("dlrm one process: batch %d, %d samples in %.1f s (%.0f samples/s), test AUC %.4f "
          "(best reachable %.4f)" % (global_batch, samples, seconds, samples / seconds, auc,
                                     meta["bayes_auc_test"]), flush=True)


def distributed(args, meta, train, test):
    import pstrain.torch as pst  # pylint: disable=import-outside-toplevel
    pst.init()
    tables = [pst.Embedding(DIM, num_embeddings=n, mode="sum", optimizer="adagrad",
                            lr=args.table_lr, init_std=args.init_std, name="C%d" % (f + 1),
                            admit_after=args.admit_after, evict_after_steps=args.evict_after_steps,
                            max_rows_per_ps=args.max_rows_per_ps)
              for f, n in enumerate(meta["cardinalities"])]
    torch.manual_seed(args.seed)
    model = DLRM(tables, pst.EmbeddingBagCollection(tables))
    steps = train[0].shape[0] // (pst.num_workers() * args.batch)
    if args.max_steps:
        steps = min(steps, args.max_steps)
    # Nothing here reads .grad between backward and step (no clipping, no
    # scaler): each worker's own gradient goes to the ps, which averages
    # them: one exchange a step fewer than with the average in .grad (DDP's).
    opt = pst.DistributedOptimizer(
        model, torch.optim.Adagrad(list(model.bottom.parameters()) + list(model.top.parameters()),
                                   lr=args.lr), steps_per_epoch=steps, epochs=args.epochs,
        average_gradients=False)
    r, n = pst.rank(), pst.num_workers()
    t0, samples = time.time(), 0
    orders = {}  # the epoch's permutation, made once (a restarted worker starts mid-epoch)

    def mine(order, step):
        """This worker's part of the epoch's global batch `step`."""
        return order[step * n * args.batch:(step + 1) * n * args.batch][r * args.batch:
                                                                        (r + 1) * args.batch]

    while not opt.done:
        epoch, step = divmod(opt.global_step, steps)
        if epoch not in orders:
            orders = {epoch: torch.randperm(
                train[0].shape[0], generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))}
        order = orders[epoch]
        idx = mine(order, step)
        opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(model(train[0][idx], train[1][idx]),
                                                  train[2][idx])
        loss.backward()
        if args.prefetch and step + 1 < steps:
            # The next step's rows come with this step's reply (async).
            ahead = train[1][mine(order, step + 1)]
            model.lookup.prefetch([ahead[:, f:f + 1] for f in range(len(tables))])
        opt.step(loss)
        samples += args.batch
        if opt.done or opt.global_step % steps == 0:
            if pst.is_chief():
                auc = evaluate(model, test)
                pst.log_metrics(test_accuracy=auc)
                print("dlrm epoch %d: test AUC %.4f (best reachable %.4f)"
                      % (epoch + 1, auc, meta["bayes_auc_test"]), flush=True)
    seconds = time.time() - t0
    print("dlrm worker %d: %d samples in %.1f s (%.0f samples/s, this worker)%s"
          % (r, samples, seconds, samples / seconds,
             ", %d table reads prefetched" % opt.prefetched() if args.prefetch else ""),
          flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", default="data/criteo_synth")
    p.add_argument("--single", action="store_true", help="one process, the tables local")
    p.add_argument("--world", type=int, default=1, help="--single: batches of --world workers")
    p.add_argument("--batch", type=int, default=256, help="per worker")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max_steps", type=int, default=0, help="steps an epoch at most (0: all)")
    p.add_argument("--lr", type=float, default=0.01, help="the dense part's Adagrad lr")
    p.add_argument("--table_lr", type=float, default=0.05, help="the tables' Adagrad lr")
    p.add_argument("--init_std", type=float, default=0.05)
    p.add_argument("--admit_after", type=int, default=0, help="a row after this many updates")
    p.add_argument("--evict_after_steps", type=int, default=0,
                   help="drop rows untouched for this many updates (0: never)")
    p.add_argument("--max_rows_per_ps", type=int, default=0, help="each table's rows a ps keeps")
    p.add_argument("--seed", type=int, default=1, help="as the job's --seed (the tables' rows)")
    p.add_argument("--prefetch", action="store_true",
                   help="async: each step asks for the next step's rows (pst.Embedding.prefetch)")
    args = p.parse_args()
    with open(os.path.join(args.data_dir, "meta.json")) as f:
        meta = json.load(f)
    train, test = load(args.data_dir, "train"), load(args.data_dir, "test")
    (single if args.single else distributed)(args, meta, train, test)


if __name__ == "__main__":
    main()
