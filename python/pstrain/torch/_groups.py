"""torch.optim's optimizers as the ps runs them: which classes, which of
their options mean what on the ps, each step's parameter-group settings
(pstrain.GROUP_FIELDS), and their state (state_dict) as the ps keeps it:
one flat array per slot (common/optimizer.h's order) and each tensor's
step count."""

import inspect

import numpy
import torch

from pstrain import GROUP_FIELDS
from pstrain._lib import ConfigError

# The ps's optimizers and torch.optim's classes of them. AdamW first: newer
# PyTorch makes it a subclass of Adam.
KINDS = (("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam), ("sgd", torch.optim.SGD),
         ("adagrad", torch.optim.Adagrad))
CLASSES = dict(KINDS)

# Each kind's slots, in the ps's order, by torch.optim's state names.
SLOTS = {"sgd": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq"),
         "adamw": ("exp_avg", "exp_avg_sq"), "adagrad": ("sum",)}

# Options whose other values the ps cannot run: (option, the value it runs).
# differentiable (autograd through step()) and capturable (step() inside a
# CUDA graph) ask for the update on the worker's own device, where the ps
# makes it; a PyTorch without one has no such key in its groups.
_ON_THE_WORKER = (("differentiable", False), ("capturable", False))
_FIXED = {
    "sgd": (("dampening", 0), ("maximize", False)) + _ON_THE_WORKER,
    "adam": (("amsgrad", False), ("maximize", False)) + _ON_THE_WORKER,
    "adamw": (("amsgrad", False), ("maximize", False)) + _ON_THE_WORKER,
    "adagrad": (("maximize", False),) + _ON_THE_WORKER,
}

# The names the old form takes (DistributedOptimizer(model, "adam", lr=...,
# betas=...)): torch.optim's, so they are the class's own arguments.
NAMES = tuple(name for name, _ in KINDS)


def torch_options(kind, job):
    """The torch.optim options of a job's optimizer flags (Task.describe_job):
    what an optimizer named in the script starts from."""
    options = {"lr": job["lr"], "weight_decay": job["weight_decay"]}
    if kind == "sgd":
        options.update(momentum=job["momentum"], nesterov=job["nesterov"])
    elif kind in ("adam", "adamw"):
        options.update(betas=(job["beta1"], job["beta2"]), eps=job["eps"])
    else:
        options.update(lr_decay=job["lr_decay"], eps=job["eps"],
                       initial_accumulator_value=job["initial_accumulator"])
    return options


def _overrides_step(subclass, cls):
    """Whether a class between `subclass` and `cls` defines a step() of its
    own (torch.optim wraps a class's step for its profiler when the first
    instance is made: the wrapper is not an override)."""
    own = inspect.unwrap(cls.step)
    for klass in subclass.__mro__:
        if klass is cls:
            return False
        step = klass.__dict__.get("step")
        if step is not None and inspect.unwrap(step) is not own:
            return True
    return False


def kind_of(optimizer):
    """The ps's name for a torch.optim optimizer, or ConfigError saying
    which it runs."""
    for name, cls in KINDS:
        if isinstance(optimizer, cls):
            if _overrides_step(type(optimizer), cls):
                raise ConfigError(
                    "%s overrides %s.step(): the ps tasks run %s's own update, not the "
                    "subclass's; give %s itself (or do the extra work on .grad before step())"
                    % (type(optimizer).__name__, cls.__name__, cls.__name__, cls.__name__))
            if name == "adam" and any(g.get("decoupled_weight_decay") for g in optimizer.param_groups):
                return "adamw"
            return name
    raise ConfigError(
        "%s: the ps tasks run torch.optim's SGD, Adam, AdamW and Adagrad (with PyTorch's "
        "definitions); give one of those" % type(optimizer).__name__)


def check_groups(kind, groups):
    """ConfigError naming the group and option for what the ps cannot run."""
    for g, group in enumerate(groups):
        for option, value in _FIXED[kind]:
            if option in group and group[option] != value:
                raise ConfigError(
                    "parameter group %d: %s=%r is not something the ps runs (it runs %s with "
                    "%s=%r); leave it at that" % (g, option, group[option], kind, option, value))
    if kind == "adagrad":
        values = {float(group.get("initial_accumulator_value", 0.0)) for group in groups}
        if len(values) > 1:
            raise ConfigError("Adagrad: every parameter group must have the same "
                              "initial_accumulator_value (they have %s)" % sorted(values))


def _number(value):
    return float(value.item() if torch.is_tensor(value) else value)


def group_settings(kind, groups):
    """Each group's settings now, a (groups, len(GROUP_FIELDS)) float64
    array: what the ps applies at this step (the scheduler's lr, momentum,
    betas included); ConfigError for an option set since to a value the ps
    cannot run (dampening, maximize, amsgrad)."""
    check_groups(kind, groups)
    out = numpy.zeros((len(groups), len(GROUP_FIELDS)), dtype=numpy.float64)
    for g, group in enumerate(groups):
        row = out[g]
        row[0] = _number(group["lr"])
        row[1] = _number(group.get("weight_decay", 0.0))
        if kind == "sgd":
            row[2] = _number(group.get("momentum", 0.0))
            row[3] = 1.0 if group.get("nesterov", False) else 0.0
        elif kind in ("adam", "adamw"):
            beta1, beta2 = group["betas"]
            row[4], row[5] = _number(beta1), _number(beta2)
            row[6] = _number(group["eps"])
        else:
            row[6] = _number(group["eps"])
            row[7] = _number(group.get("lr_decay", 0.0))
    return out


def job_options(kind, groups):
    """The job's optimizer flags (the summary, and the chief's INIT): the
    first group's options, its lr the largest initial lr of the groups (the
    ps applies each step's own)."""
    first = group_settings(kind, groups[:1])[0]
    lrs = [_number(g.get("initial_lr", g["lr"])) for g in groups]
    job = {"optimizer": kind, "lr": max(lrs) if max(lrs) > 0 else 1e-3,
           "weight_decay": first[1]}
    if kind == "sgd":
        job.update(momentum=first[2], nesterov=bool(first[3]))
    elif kind in ("adam", "adamw"):
        job.update(beta1=first[4], beta2=first[5], eps=first[6])
    else:
        job.update(eps=first[6], adagrad_lr_decay=first[7],
                   adagrad_initial_accumulator=float(groups[0].get("initial_accumulator_value",
                                                                   0.0)))
    return job


def slots_from_state(kind, state, layout, total):
    """torch.optim's state of the layout's parameters as the ps keeps it:
    (slots: float32 (num_slots, total), steps: int64 per tensor). A
    parameter without state has zeros (Adagrad: its initial value) and
    step 0."""
    names = SLOTS[kind]
    slots = numpy.zeros((len(names), total), dtype=numpy.float32)
    steps = numpy.zeros(len(layout), dtype=numpy.int64)
    for t, entry in enumerate(layout):
        s = state.get(entry.param)
        if not s:
            if kind == "adagrad":
                slots[0, entry.offset:entry.offset + entry.size] = entry.initial_accumulator
            continue
        for k, name in enumerate(names):
            value = s.get(name)
            if value is None:
                continue
            flat = value.detach().to("cpu", torch.float32).reshape(-1).numpy()
            if flat.size != entry.size:
                raise ConfigError("the optimizer state of %s has %s of %d values for a parameter "
                                  "of %d: another model's state_dict?"
                                  % (entry.name, name, flat.size, entry.size))
            slots[k, entry.offset:entry.offset + entry.size] = flat
        if "step" in s:
            steps[t] = int(_number(s["step"]))
        elif kind == "sgd" and s.get("momentum_buffer") is not None:
            steps[t] = 1  # its buffer exists: the next update keeps it
    return slots, steps


def state_from_slots(kind, groups_of, layout, slots, steps):
    """The ps's state as torch.optim's per-parameter state (what
    Optimizer.state holds), for the layout's parameters that have one."""
    names = SLOTS[kind]
    state = {}
    for t, entry in enumerate(layout):
        p = entry.param
        if steps[t] == 0 and kind != "adagrad":
            continue

        def tensor(k):
            return torch.from_numpy(slots[k, entry.offset:entry.offset + entry.size].copy()) \
                .view_as(p).to(p.device)

        if kind == "sgd":
            momentum = groups_of[t].get("momentum", 0.0)
            state[p] = {"momentum_buffer": tensor(0) if momentum else None}
            continue
        s = {"step": torch.tensor(float(steps[t]))}
        for k, name in enumerate(names):
            s[name] = tensor(k)
        state[p] = s
    return state
