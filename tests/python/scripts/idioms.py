"""Everyday PyTorch idioms in one training loop, run three ways that must
end at the same parameters: through pstrain.torch (under `pstrain
launch`), as one plain process (--reference --world=1), and as DDP with
gloo over --world ranks (--reference --world=N), each rank taking the same
share of each global batch as the pstrain worker of that rank.

The idioms (flags): a branch used on some steps only (--branch), with
zero_grad(set_to_none=...) (--set_to_none); clip_grad_norm_ or
clip_grad_value_ (--clip); parameter groups with their own lr, weight
decay and betas (--groups); a parameter frozen until a step
(--unfreeze_at); tied weights (always: dec shares enc's weight); torch's
schedulers (--scheduler; plateau_own: a ReduceLROnPlateau stepped on each
rank's own loss, whose lrs then differ between ranks); bf16 autocast (--amp=bf16); a GradScaler's
algorithm with an overflow on one rank (--amp=scaler: torch's GradScaler
on CUDA, the same algorithm written out on the CPU, where Debian's
PyTorch has none); gradient accumulation (--accumulate=passes: two
backward passes a step; no_sync: DDP's no_sync for the first); a user's
own checkpoint of model and optimizer (--save, --load, --start); .grad
replaced by a transposed view of itself or another parameter's
(--grad_edit); a rank
that skips backward() on some steps but still calls step()
(--skip_backward: the last of --skip_world ranks; the one-process
reference takes the other ranks' rows of those steps' global batch); every
rank, and one process, stepping without backward() (--skip_all). How a
worker's examples are counted: rank R taking only N of its rows each step
(--short=R:N; the one-process reference leaves that rank's other rows
out of its batch of --skip_world ranks' rows, and every loss is the mean
over the rank's rows); the chief's forward in training mode of a larger
batch every --probe steps without a backward (an evaluation that forgot
no_grad); the model called with keywords only (--call=kwargs, as Hugging
Face's models are); the loop training in eval() mode (--train_mode=eval:
the net has no dropout or BatchNorm, so the numbers are training's).
--pause_at=K:FILE holds the chief at step K until FILE exists (a test
kills a task meanwhile); --slow_ms sleeps in every step; --lr_log=FILE
has rank 0 write each step's job step and learning rate."""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import idx_data  # noqa: E402  pylint: disable=wrong-import-position


class Net(nn.Module):
    """An MLP with two heads (the branch), an encoder and a decoder that
    share one weight (tied), and a body that can be frozen."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(784, 32)
        self.enc = nn.Linear(32, 32)
        self.dec = nn.Linear(32, 32)
        self.dec.weight = self.enc.weight  # tied
        self.body = nn.Linear(32, 32)
        self.head_a = nn.Linear(32, 10)
        self.head_b = nn.Linear(32, 10)
        self.norm = nn.LayerNorm(32)

    def forward(self, x, head="a"):
        h = torch.relu(self.inp(x.flatten(1)))
        h = torch.relu(self.dec(torch.relu(self.enc(h))))
        # LayerNorm in f32: PyTorch 1.13's CPU autocast refuses bf16 into it.
        h = self.norm((h + torch.relu(self.body(h))).float())
        return F.log_softmax((self.head_a if head == "a" else self.head_b)(h), dim=1)


class CpuScaler:
    """torch.cuda.amp.GradScaler's algorithm (scale the loss; unscale_ the
    gradients in place, noting an inf or NaN; skip step() when there was
    one; back the scale off by half then, else grow it x2 every
    growth_interval steps), for the CPU, where Debian's PyTorch 1.13 has
    none."""

    def __init__(self, init_scale=2.0 ** 10, growth_interval=4):
        self.scale_value, self.growth_interval, self.tracker = init_scale, growth_interval, 0
        self.found_inf, self.unscaled = False, False

    def scale(self, loss):
        return loss * self.scale_value

    def unscale_(self, opt):
        inv = 1.0 / self.scale_value
        found = False
        with torch.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(inv)
                        found = found or not bool(torch.isfinite(p.grad).all())
        self.found_inf, self.unscaled = found, True

    def step(self, opt):
        if not self.unscaled:
            self.unscale_(opt)
        if not self.found_inf:
            opt.step()

    def update(self):
        if self.found_inf:
            self.scale_value *= 0.5
            self.tracker = 0
        else:
            self.tracker += 1
            if self.tracker == self.growth_interval:
                self.scale_value *= 2.0
                self.tracker = 0
        self.unscaled = False


def make_optimizer(args, model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    if args.groups:
        groups = [{"params": decay, "weight_decay": 0.05},
                  {"params": no_decay, "weight_decay": 0.0, "lr": args.lr * 0.5}]
        if args.optimizer in ("adam", "adamw"):
            groups[1]["betas"] = (0.8, 0.99)
        if args.optimizer == "sgd":
            groups[1]["momentum"] = 0.5
    else:
        groups = [{"params": list(model.parameters())}]
    if args.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=args.lr, momentum=0.9, weight_decay=1e-3, nesterov=True)
    if args.optimizer == "adam":
        return torch.optim.Adam(groups, lr=args.lr, weight_decay=1e-3)
    if args.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    return torch.optim.Adagrad(groups, lr=args.lr, lr_decay=0.01, initial_accumulator_value=0.1)


def make_scheduler(args, opt):
    s = args.steps
    if args.scheduler == "lambda":
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (1.0 + 0.1 * k))
    if args.scheduler == "warmup_linear":  # Hugging Face's get_linear_schedule_with_warmup
        warm = 5
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda k: k / warm if k < warm else max(0.0, (s - k) / max(1, s - warm)))
    if args.scheduler == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr * 3, total_steps=s + 1)
    if args.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=s, eta_min=args.lr * 0.1)
    if args.scheduler == "plateau_own":  # stepped on each rank's own loss (train())
        return torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0,
                                                          threshold=0.05)
    return None


def batch(x, y, step, rank, world, per_rank, seed):
    """This rank's share of global batch `step`: rows rank::world of it."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randint(0, x.shape[0], (per_rank * world,), generator=g)[rank::world]
    return x[idx], y[idx]


def train(args, model, opt, steps, rank, world, x, y, pst=None):
    sched = make_scheduler(args, opt)
    if pst is not None and sched is not None and args.scheduler != "plateau_own":
        opt.fast_forward(sched)  # (a scheduler stepped on a metric cannot be replayed)
    scaler = None
    if args.amp == "scaler":
        scaler = torch.cuda.amp.GradScaler(init_scale=2.0 ** 10, growth_interval=4) \
            if args.device == "cuda" else CpuScaler()
    device_type = "cuda" if args.device == "cuda" else "cpu"
    if args.train_mode == "eval":
        model.eval()
    step = opt.global_step if pst is not None else 0
    while step < steps:
        xb, yb = batch(x, y, args.start + step, rank, world, args.batch_size, args.seed)
        skip = step in args.skip_backward and (pst is not None or world == 1)
        if skip and pst is None:  # one process: the rows whose backward ran
            keep = torch.arange(xb.shape[0]) % args.skip_world != args.skip_world - 1
            xb, yb = xb[keep], yb[keep]
        skip = skip and pst is not None and rank == world - 1
        if args.short is not None:
            short_rank, rows = args.short
            if pst is not None or world > 1:
                if rank == short_rank:
                    xb, yb = xb[:rows], yb[:rows]
            else:  # one process: that rank's rows past its first `rows` left out
                at = torch.arange(xb.shape[0])
                keep = (at % args.skip_world != short_rank) | (at // args.skip_world < rows)
                xb, yb = xb[keep], yb[keep]
        head = "b" if args.branch and step % 3 == 2 else "a"
        if args.pause_at is not None and rank == 0 and step == args.pause_at[0] \
                and not os.path.exists(args.pause_at[1]):
            print("paused at step %d" % step, flush=True)  # until the file exists
            for _ in range(1200):
                if os.path.exists(args.pause_at[1]):
                    break
                time.sleep(0.1)
        if args.probe and rank == 0 and step % args.probe == args.probe - 1:
            model(x[:64], head)  # a forward in training mode, no backward
        if args.unfreeze_at >= 0:
            model.body.weight.requires_grad_(step >= args.unfreeze_at)
        opt.zero_grad(set_to_none=args.set_to_none)
        micro = [(xb, yb)] if args.accumulate == "none" else [(xb[::2], yb[::2]),
                                                              (xb[1::2], yb[1::2])]
        for i, (xm, ym) in enumerate(micro):
            no_sync = args.accumulate == "no_sync" and i == 0
            context = _nothing()
            if no_sync and hasattr(model, "no_sync"):
                context = model.no_sync()  # DDP's
            elif no_sync and hasattr(opt, "no_sync"):
                context = opt.no_sync()  # pstrain's
            with context:
                # bf16; the scaler's runs fp16 on CUDA (f32 on the CPU).
                with torch.autocast(device_type, dtype=torch.float16 if args.amp == "scaler"
                                    and device_type == "cuda" else torch.bfloat16,
                                    enabled=args.amp == "bf16"
                                    or (args.amp == "scaler" and device_type == "cuda")):
                    out = model(x=xm, head=head) if args.call == "kwargs" else model(xm, head)
                    if args.short is None:
                        loss = F.nll_loss(out, ym) / len(micro)
                    else:  # the mean over the rank's rows, however they are split
                        loss = F.nll_loss(out, ym, reduction="sum") / xb.shape[0]
                if args.amp == "scaler":
                    overflows = rank == (world - 1 if args.overflow_rank < 0 else args.overflow_rank)
                    if step in args.overflow_steps and overflows and i == len(micro) - 1:
                        loss = loss * float("inf")  # an overflow on this rank alone
                    loss = scaler.scale(loss)
                if not skip and step not in args.skip_all:
                    loss.backward()
        if skip and args.synchronize_skipped:
            opt.synchronize()  # the others' average in .grad, for the scaler's check
        if scaler is not None:
            scaler.unscale_(opt)
        if args.grad_edit == "transpose":  # .grad a view of itself, other strides
            model.body.weight.grad = model.body.weight.grad.t()
        elif args.grad_edit == "swap":  # two parameters' .grad exchanged
            model.body.weight.grad, model.enc.weight.grad = (model.enc.weight.grad,
                                                             model.body.weight.grad)
        if args.clip == "norm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        elif args.clip == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.002)
        job_step = opt.global_step if pst is not None else 0
        if args.lr_log and rank == 0:
            with open(args.lr_log, "a") as f:
                f.write("%d %r\n" % (job_step, opt.param_groups[0]["lr"]))
        if args.slow_ms:
            time.sleep(args.slow_ms / 1000.0)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if args.scheduler == "plateau_own":
            sched.step(float(loss.detach()))
        elif sched is not None:
            sched.step()
        if pst is not None and opt.global_step < job_step:
            step += opt.global_step - job_step - 1  # the job went back: its data too
        step += 1


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


def save(args, model, opt, rank):
    state = opt.state_dict()  # every rank: a collective in DDP, a read of the ps here
    if rank == 0:
        inner = model.module if hasattr(model, "module") else model
        torch.save({"model": inner.state_dict(), "opt": state}, args.save)


def load(args, model, opt):
    if args.load:
        ck = torch.load(args.load)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])


def run_pstrain(args, x, y):
    import pstrain.torch as pst  # pylint: disable=import-outside-toplevel
    pst.init()
    torch.manual_seed(args.seed)
    model = Net().to(args.device)
    if args.unfreeze_at >= 0:
        model.body.weight.requires_grad_(False)
    inner = make_optimizer(args, model)
    if args.load and args.load_into == "inner":
        ck = torch.load(args.load)
        model.load_state_dict(ck["model"])
        inner.load_state_dict(ck["opt"])
    job_steps = args.steps if args.job_steps < 0 else args.job_steps
    opt = pst.DistributedOptimizer(model, inner, total_steps=job_steps or None,
                                   backward_passes_per_step=2 if args.accumulate == "passes"
                                   else 1)
    if args.load and args.load_into == "wrapper":
        load(args, model, opt)
    steps = args.steps_on_rank.get(pst.rank(), args.steps)
    train(args, model, opt, steps, pst.rank(), pst.num_workers(), x.to(args.device),
          y.to(args.device), pst)
    pst.finish()
    if args.save:
        save(args, model, opt, pst.rank())
    if pst.is_chief() and args.out:
        torch.save(model.state_dict(), args.out)


def run_reference(rank, args, x, y):
    world = args.world
    if world > 1:
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    model = Net().to(args.device)
    if args.unfreeze_at >= 0:
        model.body.weight.requires_grad_(False)
    opt = make_optimizer(args, model)
    load(args, model, opt)
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    train(args, net, opt, args.steps, rank, world, x.to(args.device), y.to(args.device))
    if args.save:
        save(args, model, opt, rank)
    if rank == 0 and args.out:
        torch.save(model.state_dict(), args.out)
    if world > 1:
        import torch.distributed as dist  # pylint: disable=import-outside-toplevel
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", required=True)
    p.add_argument("--reference", action="store_true")
    p.add_argument("--world", type=int, default=1, help="reference: DDP ranks (1: one process)")
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--device", default="cpu")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw", "adagrad"])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--start", type=int, default=0, help="the data's first step (after --load)")
    p.add_argument("--batch_size", type=int, default=16, help="per rank")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--branch", action="store_true")
    p.add_argument("--set_to_none", type=int, default=1)
    p.add_argument("--clip", default="none", choices=["none", "norm", "value"])
    p.add_argument("--groups", action="store_true")
    p.add_argument("--unfreeze_at", type=int, default=-1)
    p.add_argument("--scheduler", default="none",
                   choices=["none", "lambda", "warmup_linear", "onecycle", "cosine",
                            "plateau_own"])
    p.add_argument("--amp", default="none", choices=["none", "bf16", "scaler"])
    p.add_argument("--overflow_steps", default="5,6",
                   help="scaler: steps whose loss overflows on the last rank")
    p.add_argument("--overflow_rank", type=int, default=-1,
                   help="scaler: the rank whose loss overflows (-1: the last)")
    p.add_argument("--synchronize_skipped", action="store_true",
                   help="--skip_backward: opt.synchronize() before the scaler and clipping")
    p.add_argument("--accumulate", default="none", choices=["none", "passes", "no_sync"])
    p.add_argument("--grad_edit", default="none", choices=["none", "transpose", "swap"],
                   help="before step: body.weight's .grad transposed (a strided view of "
                        "itself), or exchanged with enc.weight's")
    p.add_argument("--skip_backward", default="",
                   help="steps at which the last rank calls step() without backward()")
    p.add_argument("--skip_all", default="",
                   help="steps at which every rank (and one process) calls step() without "
                        "backward()")
    p.add_argument("--skip_world", type=int, default=2,
                   help="one-process reference of --skip_backward: the pstrain run's workers")
    p.add_argument("--save", default="", help="the end's model and optimizer state_dicts")
    p.add_argument("--job_steps", type=int, default=-1,
                   help="pstrain: the job's length (total_steps; 0: none, -1: --steps)")
    p.add_argument("--steps_on_rank", default="",
                   help="pstrain: RANK:N,... ranks whose own loop runs N steps")
    p.add_argument("--short", default="", help="R:N: rank R takes N of its rows each step")
    p.add_argument("--probe", type=int, default=0,
                   help="every this many steps the chief's forward of 64 rows, no backward")
    p.add_argument("--call", default="positional", choices=["positional", "kwargs"])
    p.add_argument("--pause_at", default="",
                   help="K:FILE: the chief waits at step K until FILE exists (a test's kill)")
    p.add_argument("--train_mode", default="train", choices=["train", "eval"])
    p.add_argument("--lr_log", default="",
                   help="rank 0 appends each step's job step and first group's lr")
    p.add_argument("--slow_ms", type=int, default=0, help="each step sleeps this long")
    p.add_argument("--load", default="")
    p.add_argument("--load_into", default="wrapper", choices=["wrapper", "inner"])
    p.add_argument("--out", default="")
    args = p.parse_args()
    args.overflow_steps = {int(s) for s in args.overflow_steps.split(",") if s}
    args.skip_backward = {int(s) for s in args.skip_backward.split(",") if s}
    args.skip_all = {int(s) for s in args.skip_all.split(",") if s}
    args.short = tuple(int(v) for v in args.short.split(":")) if args.short else None
    args.pause_at = (int(args.pause_at.split(":", 1)[0]), args.pause_at.split(":", 1)[1]) \
        if args.pause_at else None
    args.steps_on_rank = {int(r): int(n) for r, n in
                          (item.split(":") for item in args.steps_on_rank.split(",") if item)}
    torch.set_num_threads(1)
    x, y = idx_data.load(args.data_dir, "train")
    x, y = x[:4096], y[:4096]
    if not args.reference:
        run_pstrain(args, x, y)
    elif args.world == 1:
        run_reference(0, args, x, y)
    else:
        import torch.multiprocessing as mp  # pylint: disable=import-outside-toplevel
        mp.spawn(run_reference, args=(args, x, y), nprocs=args.world)


if __name__ == "__main__":
    main()
