"""A model with embedding tables, trained through pstrain.torch (as a
worker of `pstrain launch`) or, with --reference, in one process with
nn.EmbeddingBag(sparse=True) and torch.optim's sparse optimizers, on the
same data: the tests compare the two final models.

The data is a function of (seed, step): each global batch is
--world x --batch examples of 3 ids (Zipf-like over --ids) and 4 dense
features with a planted label; worker r takes the r-th --batch of it, the
reference all of it (one process at the global batch). With --branch the
second table is used on even steps only (step() leaves it alone on the
others, as torch.optim leaves a parameter whose .grad is None). With
--freeze_head the dense head is frozen on every third step (from step
1): those steps' backward reaches the tables' rows only. --zero_grad=keep
zeroes gradients with set_to_none=False (a table's .grad stays, empty, and
still steps its optimizer); --discard_steps has those steps begin with a
batch thrown away (forward and backward, then zero_grad); --shared reads
the first table twice (a table shared by two features); --flat calls the
model with flat ids and offsets first, bags of 1-3 ids."""

import argparse
import sys
import time

import torch

DIM = 8


def batch(step, world, size, num_ids, seed):
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    n = world * size
    u = torch.rand(n, 3, generator=g)
    ids = (num_ids * u.pow(3)).long().clamp_(max=num_ids - 1)  # frequent small ids
    dense = torch.randn(n, 4, generator=g)
    logit = dense[:, 0] - dense[:, 1] + (ids[:, 0] % 3 == 0).float() - 0.5
    label = (torch.rand(n, generator=g) < torch.sigmoid(logit)).float()
    return ids, dense, label


class Net(torch.nn.Module):
    def __init__(self, tables, together=None):
        """`together`: a pst.EmbeddingBagCollection of both tables, which
        then reads them in one request to each ps when both are used."""
        super().__init__()
        self.emb, self.emb2 = tables
        self.together = together
        self.head = torch.nn.Linear(DIM + 4, 1)
        with torch.no_grad():
            g = torch.Generator().manual_seed(7)
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=g) * 0.1)
            self.head.bias.zero_()

    def forward(self, ids, dense, use_second, offsets=None):
        """`ids` 2-D bags of 3, or (with `offsets`) flat bags, whose
        second table reads each bag's first id."""
        if offsets is not None:
            e = self.emb(ids, offsets)
            if use_second:
                e = e + self.emb2(ids[offsets].unsqueeze(1))
        elif use_second and self.together is not None:
            first, second = self.together([ids, ids[:, :2]])
            e = first + second
        else:
            e = self.emb(ids)
            if use_second:
                e = e + self.emb2(ids[:, :2])
        return self.head(torch.cat([e, dense], dim=1)).squeeze(1)


def flat(ids):
    """--flat: each example's bag its first 1-3 ids (by its second id),
    as flat ids and offsets."""
    lengths = 1 + ids[:, 1] % 3
    keep = torch.arange(3).unsqueeze(0) < lengths.unsqueeze(1)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
    return ids[keep], offsets


def call(model, ids, dense, use_second, args):
    """The model on a batch, its ids as --flat says."""
    if args.flat:  # the model's first input the flat ids: its examples are the bags
        flat_ids, offsets = flat(ids)
        return model(flat_ids, dense, use_second, offsets)
    return model(ids, dense, use_second)


def table_options(args):
    lr = {"sgd": 0.5, "adagrad": 0.3, "adam": 0.05}[args.table_optimizer]
    options = dict(optimizer=args.table_optimizer, lr=lr, admit_after=args.admit_after)
    if args.table_eps is not None:
        options["eps"] = args.table_eps
    return options


def table_lr(args, step):
    """The tables' learning rate at `step`: constant, or with --decay a
    linear decay to half of it over the run (a script's schedule)."""
    base = table_options(args)["lr"]
    return base * (1 - 0.5 * step / args.steps) if args.decay else base


def freeze(model, args, step):
    """--freeze_head: the head trains on two steps of three."""
    for p in model.head.parameters():
        p.requires_grad_(not (args.freeze_head and step % 3 == 1))


def run_pstrain(args):
    import pstrain.torch as pst  # pylint: disable=import-outside-toplevel
    pst.init()
    opts = table_options(args)
    if args.mismatch and pst.rank() == 1:
        opts["lr"] *= 2
    tables = (pst.Embedding(DIM, num_embeddings=args.ids, mode="sum", name="first", **opts),)
    if not args.shared:  # --shared: the job's one table
        tables += (pst.Embedding(DIM, num_embeddings=args.ids, mode="mean", name="second",
                                 **opts),)
    read = (tables[0], tables[0]) if args.shared else tables
    model = Net(read, pst.EmbeddingBagCollection(read) if args.collection else None)
    opt = pst.DistributedOptimizer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                   total_steps=args.steps)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    r = pst.rank()
    while not opt.done:
        step = opt.global_step
        time.sleep(args.step_sleep_ms / 1000)
        ids, dense, label = batch(step, pst.num_workers(), args.batch, args.ids, args.seed)
        part = slice(r * args.batch, (r + 1) * args.batch)
        if step in args.discard_steps:  # a batch thrown away: its rows' gradients too
            other, x, y = batch(step + 10_000, pst.num_workers(), args.batch, args.ids, args.seed)
            scale = float("inf") if args.discard_inf else 1.0  # an overflow GradScaler skips
            (scale * loss_fn(call(model, other[part], x[part], True, args), y[part])).backward()
        opt.zero_grad(set_to_none=args.zero_grad == "none")
        for table in tables:
            table.lr = table_lr(args, step)
        freeze(model, args, step)
        loss = loss_fn(call(model, ids[part], dense[part], not args.branch or step % 2 == 0, args),
                       label[part])
        loss.backward()
        if args.prefetch != "none":
            prefetch(model, tables, args, step + 1, part)
        opt.step(loss)
        if args.read_between:
            # A read between steps of the very ids prefetched: it asks the ps.
            tables[0].read_rows(batch(step + 1, pst.num_workers(), args.batch, args.ids,
                                      args.seed)[0][part])
    # The rejoins a killed ps made this worker take (the library's count).
    print("rejoins %d" % opt._worker.rejoins(), flush=True)  # pylint: disable=protected-access
    if pst.is_chief():
        every = torch.arange(args.ids)
        out = {"head.weight": model.head.weight.detach().clone(),
               "head.bias": model.head.bias.detach().clone(),
               "first": tables[0].read_rows(every)}
        if not args.shared:
            out["second"] = tables[1].read_rows(every)
        if args.prefetch != "none":
            out["prefetched"] = torch.tensor(opt.prefetched())
        torch.save(out, args.out)
    pst.finish()


def prefetch(model, tables, args, step, part):
    """The rows of step `step`'s forward asked for behind this step's push
    (--prefetch=next), or rows of other ids (--prefetch=other: the forward
    must ask for its own)."""
    import pstrain.torch as pst  # pylint: disable=import-outside-toplevel
    ids = batch(step, pst.num_workers(), args.batch, args.ids, args.seed)[0][part]
    if args.prefetch == "other":
        ids = (ids + 1) % args.ids
    second = not args.branch or step % 2 == 0
    if second and model.together is not None:
        model.together.prefetch([ids, ids[:, :2]])
        return
    tables[0].prefetch(ids)
    if second:
        tables[1].prefetch(ids[:, :2])


def run_reference(args):
    import pstrain  # pylint: disable=import-outside-toplevel
    every = torch.arange(args.ids)

    def bag(index, mode):
        e = torch.nn.EmbeddingBag(args.ids, DIM, mode=mode, sparse=True)
        with torch.no_grad():
            if args.admit_after > 0:
                e.weight.zero_()
            else:
                e.weight.copy_(torch.from_numpy(pstrain.embedding_initial_rows(
                    every.numpy(), DIM, args.seed, index)))
        return e

    tables = (bag(0, "sum"), bag(1, "mean"))
    touches = [torch.zeros(args.ids, dtype=torch.int64) for _ in tables]
    model = Net((tables[0], tables[0]) if args.shared else tables)
    opts = table_options(args)
    kind = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad,
            "adam": torch.optim.SparseAdam}[opts["optimizer"]]
    sparse = kind(list(tables[0].parameters()) + list(tables[1].parameters()), lr=opts["lr"])
    dense = torch.optim.SGD(model.head.parameters(), lr=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for step in range(args.steps):
        ids, x, label = batch(step, args.world, args.batch, args.ids, args.seed)
        if step in args.discard_steps:
            other, x2, y2 = batch(step + 10_000, args.world, args.batch, args.ids, args.seed)
            scale = float("inf") if args.discard_inf else 1.0
            (scale * loss_fn(call(model, other, x2, True, args), y2)).backward()
        sparse.zero_grad(set_to_none=args.zero_grad == "none")
        dense.zero_grad(set_to_none=args.zero_grad == "none")
        for group in sparse.param_groups:
            group["lr"] = table_lr(args, step)
        freeze(model, args, step)
        loss = loss_fn(call(model, ids, x, not args.branch or step % 2 == 0, args), label)
        loss.backward()
        empty = []
        if args.admit_after > 0:
            for index, (table, count) in enumerate(zip(tables, touches)):
                if admit(table, count, index, args):
                    empty.append(table.weight)
        sparse.step()
        for weight in empty:
            # Every row's gradient was dropped: the table still took an
            # update (SparseAdam's step moves), as on the ps; torch cannot
            # step on an empty sparse gradient, so it is counted here.
            if opts["optimizer"] == "adam":
                state = sparse.state[weight]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(weight),
                                 exp_avg_sq=torch.zeros_like(weight))
                state["step"] += 1
        dense.step()
    out = {"head.weight": model.head.weight.detach().clone(),
           "head.bias": model.head.bias.detach().clone(),
           "first": tables[0].weight.detach().clone()}
    if not args.shared:
        out["second"] = tables[1].weight.detach().clone()
    torch.save(out, args.out)


def admit(table, count, index, args):
    """The ps's admission written out: an update touches its ids; one
    that has no row yet drops its gradient, and at its admit_after-th
    touch gets its initial row. Returns whether the table had a gradient
    and every row of it was dropped (its .grad is then None)."""
    import pstrain  # pylint: disable=import-outside-toplevel
    if table.weight.grad is None:
        return False
    grad = table.weight.grad.coalesce()
    ids = grad.indices()[0]
    had_row = count[ids] >= args.admit_after
    count[ids] += 1
    admitted = ids[count[ids] == args.admit_after]
    with torch.no_grad():
        if admitted.numel() > 0:
            table.weight[admitted] = torch.from_numpy(pstrain.embedding_initial_rows(
                admitted.numpy(), DIM, args.seed, index))
    if not bool(had_row.any()):
        table.weight.grad = None
        return True
    table.weight.grad = torch.sparse_coo_tensor(grad.indices()[:, had_row],
                                                grad.values()[had_row], grad.shape)
    return False


def main():
    global DIM  # pylint: disable=global-statement
    p = argparse.ArgumentParser()
    p.add_argument("--reference", action="store_true")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--ids", type=int, default=200)
    p.add_argument("--dim", type=int, default=8, help="the tables' embedding_dim")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--table_optimizer", default="adagrad")
    p.add_argument("--admit_after", type=int, default=0)
    p.add_argument("--table_eps", type=float, default=None, help="the tables' eps")
    p.add_argument("--branch", action="store_true")
    p.add_argument("--freeze_head", action="store_true",
                   help="the head frozen on every third step: a backward of rows only")
    p.add_argument("--decay", action="store_true", help="the tables' lr decays (emb.lr)")
    p.add_argument("--mismatch", action="store_true", help="worker 1's tables differ")
    p.add_argument("--collection", action="store_true",
                   help="read both tables through one pst.EmbeddingBagCollection")
    p.add_argument("--step_sleep_ms", type=float, default=0,
                   help="each worker sleeps this long before each step (a job long enough "
                        "for every worker to take part)")
    p.add_argument("--prefetch", choices=("none", "next", "other"), default="none",
                   help="ask for the next forward's rows (or other ids') behind each push")
    p.add_argument("--read_between", action="store_true",
                   help="after each step, read the next step's rows of the first table")
    p.add_argument("--zero_grad", choices=("none", "keep"), default="none",
                   help="zero_grad(set_to_none=True) (none) or False (keep)")
    p.add_argument("--discard_steps", default="",
                   help="steps (comma-separated) that begin with a batch thrown away")
    p.add_argument("--discard_inf", action="store_true",
                   help="the thrown-away batches' gradients infinite")
    p.add_argument("--shared", action="store_true",
                   help="the first table read twice, in place of the second")
    p.add_argument("--flat", action="store_true",
                   help="the model called with flat ids and offsets first, bags of 1-3 ids")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.discard_steps = {int(k) for k in args.discard_steps.split(",") if k}
    DIM = args.dim
    (run_reference if args.reference else run_pstrain)(args)


if __name__ == "__main__":
    sys.exit(main())
