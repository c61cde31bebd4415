"""A loop that changes its parameters after the job began: the ps tasks
hold them, so the next step would overwrite the change silently, and
pstrain.torch refuses it saying what happened, whether the change came
between steps or inside one. What is taken: a change
after DistributedOptimizer but before the first step (the job starts from
it), and weights swapped out and back between steps (an EMA's, for an
evaluation) and moved inside a step and copied back before step() (as
SAM's and FGM's loops do), which change nothing, and a copy of the model
(an EMA's copy.deepcopy), which is not the job's; one made before the
optimizer's first use, of a worker's own initial values, is said (not
where the worker joins an async job under way: ema_late). The
optimizer's state is the ps's
too: a read of opt.state, or a reset, says where it is. A loop that steps
the torch.optim optimizer itself is refused at finish(). Five steps of a
small model, 1 worker.

    edited_params.py KIND     clamp | clamp_in_step | reload | max_norm | assign_before |
                              ema_swap | ema_deepcopy | swap_in_step | sparse | dampening |
                              state_read | state_reset | inner_step | ema_early |
                              ema_joined | ema_late | plateau_ff"""

import collections
import copy
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import pstrain.torch as pst


class Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.emb = nn.Embedding(6, 4, max_norm=1.0 if kind == "max_norm" else None,
                                sparse=kind == "sparse")
        self.fc = nn.Linear(4, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(0, keepdim=True))


def main():
    kind = sys.argv[1]
    pst.init()
    # ema_early, ema_joined: each worker's own initial values (an unseeded
    # script's), an EMA's copy before the optimizer's first use, or after
    # reading global_step (which joins the job).
    torch.manual_seed(pst.rank() if kind in ("ema_early", "ema_joined") else 0)
    model = Net(kind)
    lr = 0.0 if kind == "assign_before" else 0.1
    inner = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    opt = pst.DistributedOptimizer(model, inner, total_steps=5)
    if kind == "plateau_ff":  # a scheduler stepped on a metric cannot be replayed
        opt.fast_forward(torch.optim.lr_scheduler.ReduceLROnPlateau(opt))
    if kind == "ema_joined":
        print("joined at step %d" % opt.global_step)
    if kind in ("ema_early", "ema_joined", "ema_late"):
        ema = copy.deepcopy(model)
    # ema_late (async, seeded alike): worker 1 joins once the chief's steps
    # are in, its copy the job's initial values but not its current ones.
    marker = os.path.join(os.environ["PSTRAIN_RUN_DIR"], "chief_stepped")
    if kind == "ema_late" and not pst.is_chief():
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
    if kind == "inner_step":  # the torch.optim optimizer's own step(), by mistake
        for _ in range(5):
            inner.zero_grad()
            F.mse_loss(model(torch.tensor([0, 2, 5])), torch.ones(1, 2)).backward()
            inner.step()
        pst.finish()  # would put the job's parameters back over the loop's
        print("trained %s" % kind)
        return
    if kind == "assign_before":  # pretrained values, after wrapping (worker 1: others)
        model.fc.weight.data = torch.full((2, 4), 0.5 if pst.is_chief() else 0.25)
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.tensor([0, 2, 5])
    while not opt.done:
        step = opt.global_step
        if step == 2:
            if kind == "clamp":
                for p in model.parameters():
                    p.data.clamp_(-0.01, 0.01)
            elif kind == "reload":
                model.load_state_dict(snapshot)
            elif kind == "ema_swap":
                kept = [p.detach().clone() for p in model.parameters()]
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(0.5)
                    model(ids)  # an evaluation with other weights
                    for p, k in zip(model.parameters(), kept):
                        p.copy_(k)
            elif kind == "dampening":
                opt.param_groups[0]["dampening"] = 0.5
            elif kind == "ema_deepcopy":
                ema = copy.deepcopy(model)
                with torch.no_grad():
                    ema(ids)  # the copy runs, and is not the job's model
            elif kind == "state_read":
                print(opt.state[model.fc.weight]["momentum_buffer"])
            elif kind == "state_reset":
                opt.state = collections.defaultdict(dict)
        opt.zero_grad()
        F.mse_loss(model(ids), torch.ones(1, 2)).backward()
        if step == 2 and kind == "clamp_in_step":  # between backward and step()
            for p in model.parameters():
                p.data.clamp_(-0.01, 0.01)
        if step == 2 and kind == "swap_in_step":  # SAM's: a look at moved weights, then back
            kept = [p.detach().clone() for p in model.parameters()]
            for p in model.parameters():
                p.data.add_(0.05)
            with torch.no_grad():
                model(ids)
            for p, k in zip(model.parameters(), kept):
                p.data.copy_(k)
        opt.step()
    if kind == "ema_late":
        if pst.is_chief():
            open(marker, "w").close()
        else:
            print("joined at step %d" % opt.global_step)
    if kind in ("ema_early", "ema_joined", "ema_late"):
        with torch.no_grad():
            ema(ids)
    print("trained %s: %d steps, fc.weight %s" % (kind, opt.global_step,
                                                  model.fc.weight.flatten().tolist()))


if __name__ == "__main__":
    main()
