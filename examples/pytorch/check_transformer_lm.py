"""Checks of transformer_lm.py's pieces that a pstrain job against one
process relies on; a few seconds on a CPU, no pstrain needed.

    python3 examples/pytorch/check_transformer_lm.py

- One process with batch N x B sees at step s exactly the sequences of N
  workers of batch B, in rank order; a step's data is a function of
  (seed, step) alone.
- The mean of the workers' gradients is the one process's gradient.
- The head is the token embedding; AdamW's groups hold every parameter
  once, decaying exactly the matrices and embeddings.
- LambdaLR gives each step warm-up then cosine; bf16 autocast runs.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_lm as lm  # noqa: E402  pylint: disable=wrong-import-position


def tiny_args(**kw):
    args = argparse.Namespace(seed=3, layers=2, d_model=32, heads=4, context=16, device="cpu",
                              amp="off", steps=100, warmup=10, min_lr_ratio=0.1, lr=1e-3,
                              eval_batch=8)
    vars(args).update(kw)
    return args


def check_batches(train):
    b, ctx = 4, 32
    for step in (0, 1, 17, 599):
        x1, y1 = lm.batch(train, 1, step, 0, 1, 2 * b, ctx)
        assert x1.shape == (2 * b, ctx) and x1.dtype == torch.int64
        assert torch.equal(x1[:, 1:], y1[:, :-1]), "y is x shifted by one"
        for n in (2, 4):
            shares = [lm.batch(train, 1, step, r, n, 2 * b // n, ctx) for r in range(n)]
            assert torch.equal(torch.cat([x for x, _ in shares]), x1), (step, n)
            assert torch.equal(torch.cat([y for _, y in shares]), y1), (step, n)
        assert torch.equal(lm.batch(train, 1, step, 0, 1, 2 * b, ctx)[0], x1), "not repeatable"
        assert not torch.equal(lm.batch(train, 1, step + 1, 0, 1, 2 * b, ctx)[0], x1)
        assert not torch.equal(lm.batch(train, 2, step, 0, 1, 2 * b, ctx)[0], x1)


def grads(model, x, y):
    model.zero_grad(set_to_none=True)
    lm.lm_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def check_gradient_average(train):
    args = tiny_args()
    model = lm.make_model(args)
    whole = grads(model, *lm.batch(train, 1, 5, 0, 1, 8, args.context))
    shares = [grads(model, *lm.batch(train, 1, 5, r, 2, 4, args.context)) for r in range(2)]
    for g, g0, g1 in zip(whole, *shares):
        mean = (g0 + g1) / 2
        assert torch.allclose(g, mean, rtol=1e-4, atol=1e-7), (g - mean).abs().max()


def check_model_and_groups():
    args = tiny_args()
    model = lm.make_model(args)
    assert model.head.weight is model.tok.weight, "weight tying"
    again = lm.make_model(args)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))
    groups = lm.param_groups(model, 0.1)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    name = {id(p): n for n, p in model.named_parameters()}
    decayed = sorted(name[id(p)] for p in groups[0]["params"])
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert "tok.weight" in decayed and "pos.weight" in decayed
    assert all(n.endswith("weight") and ".ln" not in n and not n.startswith("ln")
               for n in decayed), decayed
    assert all(n.endswith("bias") or "ln" in n for n in (name[id(p)] for p in groups[1]["params"]))


def check_schedule():
    args = tiny_args()
    model = lm.make_model(args)
    opt = torch.optim.AdamW(lm.param_groups(model, 0.1), lr=args.lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: lm.lr_factor(k, args))
    seen = []
    for _ in range(args.steps):
        seen.append(opt.param_groups[0]["lr"])
        assert opt.param_groups[1]["lr"] == seen[-1]
        opt.step()
        sched.step()
    assert abs(seen[0] - args.lr / args.warmup) < 1e-12
    assert abs(seen[args.warmup - 1] - args.lr) < 1e-12 and abs(seen[args.warmup] - args.lr) < 1e-12
    assert all(a >= b for a, b in zip(seen[args.warmup:], seen[args.warmup + 1:])), "cosine"
    assert abs(seen[-1] - args.lr * lm.lr_factor(args.steps - 1, args)) < 1e-12
    assert seen[-1] > args.lr * args.min_lr_ratio


def check_bf16(train):
    args = tiny_args(amp="bf16")
    model = lm.make_model(args)
    x, y = lm.batch(train, 1, 0, 0, 1, 4, args.context)
    with lm.autocast(args):
        logits = model(x)
        loss = lm.lm_loss(logits, y)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    loss.backward()
    assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()
               for p in model.parameters())
    val_x, val_y = lm.validation_set(train, 16, args.context)
    loss, accuracy = lm.evaluate(model, val_x, val_y, args)
    assert 4.5 < loss < 6.5 and 0 <= accuracy <= 1, (loss, accuracy)


def main():
    train, val = lm.load_corpus()
    assert len(train) > 1e6 and len(val) > 1e4, (len(train), len(val))
    check_batches(train)
    check_gradient_average(train)
    check_model_and_groups()
    check_schedule()
    check_bf16(train)
    print("ok: %d training bytes, %d validation bytes" % (len(train), len(val)))


if __name__ == "__main__":
    main()
