"""A small decoder-only transformer language model on the bytes of Python's
own standard library, trained as one PyTorch process or as a pstrain
worker by the same training loop.

    python3 examples/pytorch/transformer_lm.py --single --batch_size=32
    pstrain launch --cluster_spec=cluster_specs/local_1ps_2w.json --mode=sync \\
        -- python3 examples/pytorch/transformer_lm.py --batch_size=16

Data: the top-level *.py files of the running interpreter's standard
library, sorted by name; every 20th is validation, the rest training.
Tokens are bytes (vocabulary 256). Global step s draws
num_workers x batch_size offsets from a generator seeded by (seed, s);
worker r takes the r-th contiguous slice of batch_size of them. One
process with batch N x B therefore sees at step s exactly the sequences
that N workers of batch B see together, in rank order.

The recipe: AdamW (betas 0.9, 0.95) with weight decay on the weight
matrices and the embedding only, linear warm-up then cosine decay through
LambdaLR, gradient clipping at norm 1, bfloat16 autocast. Under pstrain
the ps applies AdamW to each parameter group as torch.optim does.
"""

import argparse
import contextlib
import csv
import glob
import math
import os
import sysconfig
import time

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256  # bytes


# -- data ---------------------------------------------------------------------

def source_files():
    """The standard library's top-level sources, sorted by name."""
    return sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))


def load_corpus(val_every=20):
    """(train, val): uint8 tensors of the files' bytes, concatenated; file i
    (by sorted name) is validation where i % val_every == 0."""
    parts = ([], [])
    for i, path in enumerate(source_files()):
        with open(path, "rb") as f:
            parts[i % val_every == 0].append(f.read())
    return tuple(torch.frombuffer(bytearray(b"".join(p)), dtype=torch.uint8) for p in parts)


def sequences(data, offsets, context):
    """x, y: int64 [len(offsets), context]; y is x shifted by one byte."""
    idx = torch.as_tensor(offsets, dtype=torch.int64)[:, None] + torch.arange(context + 1)
    rows = data[idx].long()
    return rows[:, :-1], rows[:, 1:]


def batch(data, seed, step, rank, num_workers, batch_size, context):
    """Worker `rank`'s share of global step `step`: a pure function of
    (seed, step) and the global batch num_workers x batch_size, so that the
    workers' shares, concatenated in rank order, are the global batch."""
    rng = numpy.random.default_rng([seed, step])
    offsets = rng.integers(0, len(data) - context, size=num_workers * batch_size)
    return sequences(data, offsets[rank * batch_size:(rank + 1) * batch_size], context)


def validation_set(data, count, context):
    """`count` sequences at evenly spaced offsets over the validation bytes."""
    offsets = numpy.linspace(0, len(data) - context - 1, count).astype(numpy.int64)
    return sequences(data, offsets, context)


# -- model --------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t sees positions <= t."""

    def __init__(self, d_model, heads, context):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.register_buffer("causal", torch.ones(context, context, dtype=torch.bool).tril(),
                             persistent=False)

    def forward(self, x):
        """x: [B, T, C] -> [B, T, C]."""
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=2))                   # [B, H, T, C/H]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))    # [B, H, T, T]
        att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
        # Softmax in float32: under bf16 autocast its sums would lose bits.
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(v.dtype)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model, heads, context):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads, context)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TransformerLM(nn.Module):
    """Bytes [B, T] -> next-byte logits [B, T, 256]. The output head is the
    token embedding (one Parameter, weight tying)."""

    def __init__(self, layers, d_model, heads, context):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, heads, context) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight
        self.apply(self._init)
        # GPT-2's scaling of the projections into the residual stream.
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.2.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        t = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln_f(self.blocks(x)))


def make_model(args):
    """The model's initial weights, a function of args.seed alone."""
    torch.manual_seed(args.seed)
    return TransformerLM(args.layers, args.d_model, args.heads, args.context).to(args.device)


def lm_loss(logits, y):
    """Mean cross-entropy in nats per byte, computed in float32."""
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


# -- the recipe ---------------------------------------------------------------

def param_groups(model, weight_decay):
    """AdamW's two groups: weight decay for the weight matrices and the
    embeddings (dim >= 2), none for biases and LayerNorm's parameters.
    named_parameters() lists the tied embedding once."""
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def lr_factor(step, args):
    """The learning rate of step `step` over args.lr: linear warm-up over
    args.warmup steps, then cosine decay to args.min_lr_ratio at the end."""
    if step < args.warmup:
        return (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def autocast(args):
    if args.amp == "off":
        return contextlib.nullcontext()
    return torch.autocast(args.device, dtype=torch.bfloat16)


@torch.no_grad()
def evaluate(model, val_x, val_y, args):
    """(loss in nats per byte, next-byte accuracy) over the validation set."""
    model.eval()
    loss_sum = correct = 0.0
    for x, y in zip(val_x.split(args.eval_batch), val_y.split(args.eval_batch)):
        x, y = x.to(args.device), y.to(args.device)
        with autocast(args):
            logits = model(x)
        loss_sum += float(lm_loss(logits, y)) * y.numel()
        correct += float((logits.argmax(-1) == y).sum())
    model.train()
    return loss_sum / val_y.numel(), correct / val_y.numel()


# -- the training loop --------------------------------------------------------

def global_steps(opt, pst, args):
    """The global steps this process computes: 0 .. steps-1 alone; with
    pstrain, the job's next step for this worker until the job is done."""
    if pst is None:
        yield from range(args.steps)
        return
    while not opt.done:
        yield opt.global_step


class Curve:
    """The chief's evaluations: one line on stdout each, and a CSV row
    (step, wall_s, train_s, val_loss, perplexity, accuracy) with --curve.
    A restarted chief appends to the file; its times start again at 0."""

    def __init__(self, path, append):
        self.file = self.writer = None
        if path:
            append = append and os.path.exists(path)
            # Open for the whole run: a row is flushed as each evaluation ends.
            self.file = open(path, "a" if append else "w",  # pylint: disable=consider-using-with
                             newline="")
            self.writer = csv.writer(self.file)
            if not append:
                self.writer.writerow(["step", "wall_s", "train_s", "val_loss", "perplexity",
                                      "accuracy"])

    def add(self, step, wall_s, train_s, loss, accuracy, train_loss=None):
        ppl = math.exp(loss)
        print("step %d: val loss %.4f nats/byte, perplexity %.3f, accuracy %.4f%s, %.1f s"
              % (step, loss, ppl, accuracy,
                 "" if train_loss is None else ", train loss %.4f" % train_loss, wall_s),
              flush=True)
        if self.writer:
            self.writer.writerow([step, "%.3f" % wall_s, "%.3f" % train_s, "%.6f" % loss,
                                  "%.6f" % ppl, "%.6f" % accuracy])
            self.file.flush()


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--single", action="store_true", help="one plain PyTorch process, no pstrain")
    add("--simulate_workers", type=int, default=1,
        help="--single: draw the global batch of this many workers of --batch_size")
    add("--simulate_rank", type=int, default=0, help="--single: and take this worker's share")
    add("--steps", type=int, default=600)
    add("--batch_size", type=int, default=16, help="sequences per worker per step")
    add("--context", type=int, default=128, help="bytes per sequence")
    add("--layers", type=int, default=4)
    add("--d_model", type=int, default=128)
    add("--heads", type=int, default=4)
    add("--lr", type=float, default=3e-3)
    add("--min_lr_ratio", type=float, default=0.1)
    add("--warmup", type=int, default=30)
    add("--weight_decay", type=float, default=0.1)
    add("--clip", type=float, default=1.0)
    add("--seed", type=int, default=1)
    add("--eval_every", type=int, default=50)
    add("--eval_sequences", type=int, default=256)
    add("--eval_batch", type=int, default=64)
    add("--device", choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu")
    add("--amp", choices=["bf16", "off"], default=None,
        help="default: bf16 on CPU, and on CUDA where the GPU supports it")
    add("--curve", default="", help="CSV of the evaluations (the chief's)")
    args = parser.parse_args()
    if args.amp is None:
        args.amp = "bf16" if args.device == "cpu" or torch.cuda.is_bf16_supported() else "off"
    return args


def join(args):
    """(pstrain.torch or None, rank, num_workers, is_chief) of this process."""
    if args.single:
        return None, args.simulate_rank, args.simulate_workers, True
    import pstrain.torch as pst  # pylint: disable=import-outside-toplevel
    pst.init()
    return pst, pst.rank(), pst.num_workers(), pst.is_chief()


def describe(args, train, val, model, rank, num_workers):
    print("%d training bytes, %d validation bytes; %d parameters; worker %d of %d, batch %d x %d"
          " bytes; amp %s on %s, %d threads"
          % (len(train), len(val), sum(p.numel() for p in model.parameters()), rank, num_workers,
             args.batch_size, args.context, args.amp, args.device, torch.get_num_threads()),
          flush=True)


def report_throughput(args, steps, train_s, wall_s, num_workers, distributed):
    tokens = steps * args.batch_size * args.context
    # The job: every worker's steps took batch_size sequences each.
    job = ("" if num_workers == 1 or not distributed else
           ", job %.0f tokens/s (%d workers)" % (tokens * num_workers / train_s, num_workers))
    print("trained %d steps in %.1f s (wall %.1f s): %.0f tokens/s this worker%s"
          % (steps, train_s, wall_s, tokens / train_s, job), flush=True)


def main():
    args = parse_args()
    pst, rank, num_workers, chief = join(args)
    train, val = load_corpus()
    val_x, val_y = validation_set(val, args.eval_sequences, args.context)
    model = make_model(args)
    opt = inner = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr,
                                    betas=(0.9, 0.95))
    if pst is not None:
        opt = pst.DistributedOptimizer(model, inner, total_steps=args.steps)
    first_step = 0 if pst is None else opt.global_step  # a restarted worker's is the job's
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: lr_factor(k, args))
    if pst is not None:
        # At the job's step: a restarted worker's now, and every worker's
        # again where a ps restarted from its checkpoint takes the job back.
        opt.fast_forward(sched)
    curve = Curve(args.curve if chief else "", append=first_step > 0)
    describe(args, train, val, model, rank, num_workers)

    start = time.monotonic()
    eval_s = 0.0  # time spent evaluating, left out of the training time

    def log_eval(step, train_loss=None):
        nonlocal eval_s
        t0 = time.monotonic()
        loss, accuracy = evaluate(model, val_x, val_y, args)
        eval_s += time.monotonic() - t0
        wall = time.monotonic() - start
        curve.add(step, wall, wall - eval_s, loss, accuracy, train_loss)
        if pst is not None:
            pst.log_metrics(test_accuracy=accuracy, test_loss=loss)

    if chief and first_step == 0:
        log_eval(0)
    steps_done, loss_sum, loss_count = 0, 0.0, 0
    model.train()
    for s in global_steps(opt, pst, args):
        x, y = batch(train, args.seed, s, rank, num_workers, args.batch_size, args.context)
        x, y = x.to(args.device), y.to(args.device)
        opt.zero_grad(set_to_none=True)
        with autocast(args):
            loss = lm_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        sched.step()
        steps_done += 1
        loss_sum, loss_count = loss_sum + float(loss), loss_count + 1
        if chief and (s + 1) % args.eval_every == 0 and s + 1 < args.steps:
            log_eval(s + 1, loss_sum / loss_count)
            loss_sum, loss_count = 0.0, 0
    train_s = time.monotonic() - start - eval_s

    if pst is not None:
        pst.finish()  # every worker's last gradient applied: the chief holds the final model
    if chief:
        log_eval(args.steps if pst is None else opt.global_step,
                 loss_sum / loss_count if loss_count else None)
    report_throughput(args, steps_done, train_s, time.monotonic() - start, num_workers,
                      pst is not None)


if __name__ == "__main__":
    main()
