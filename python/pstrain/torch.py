"""pstrain.torch: a PyTorch script as a worker of a pstrain job.

    import pstrain.torch as pst
    pst.init()                                      # the task, from TF_CONFIG
    sampler = pst.DistributedSampler(len(train_set), batch_size=64, seed=1)
    opt = pst.DistributedOptimizer(model, optimizer="sgd", lr=0.01, momentum=0.5,
                                   sampler=sampler, epochs=args.epochs)
    for epoch in range(opt.start_epoch, args.epochs):
        for idx in sampler.batches(epoch):          # this worker's share of each global batch
            opt.zero_grad()
            loss = F.nll_loss(model(x[idx]), y[idx])
            loss.backward()                         # each gradient is pushed as it is ready
            opt.step(loss)                          # the model holds the ps's new parameters
        if pst.is_chief():
            pst.log_metrics(test_accuracy=acc, test_loss=test_loss)

The ps tasks hold the parameters and the optimizer (sgd, adam, adamw,
adagrad, with PyTorch's definitions, and the learning-rate schedules), so
DistributedOptimizer takes the optimizer's name and options, not a
torch.optim object. The job's flags given to `pstrain launch` (--mode,
--staleness, --backup_workers, --wire, checkpoints, metrics, timeline)
reach the worker through its environment and mean what they mean for the
C++ workers.

Parameters cross to the library without copies: the model's parameters
and gradients become views of two flat float32 buffers that the library
reads and writes in place (CUDA models: the buffers are pinned host
memory, copied to and from the device once a step).

Buffers that are not parameters (BatchNorm's running mean and variance)
are not sent to the ps: each worker keeps its own, updated by its own
batches, and the chief evaluates with its own. Each worker saves them in
the run directory (buffers/worker<rank>.pt, every 30 s and when it
finishes), and a worker that joins a job under way (restarted, or the job
resumed with `pstrain launch --resume`) starts from the ones its
predecessor saved; where there are none, or they are not this model's, it
starts them afresh and says so.
"""

import atexit
import math
import os
import sys
import time

import numpy
import torch

import pstrain
from pstrain._lib import ConfigError, JobFinished, PstrainError, UsageError

__all__ = ["init", "rank", "num_workers", "is_chief", "run_dir", "DistributedOptimizer",
           "DistributedSampler", "log_metrics", "finish", "PstrainError", "ConfigError",
           "UsageError", "JobFinished"]


class _Process:
    """What pst.init() made: the task, and the optimizer once there is one."""

    def __init__(self, task):
        self.task = task
        self.optimizer = None
        self.failed = False  # an exception reached the top of the script


_process = None


def _state():
    if _process is None:
        raise UsageError("call pstrain.torch.init() first")
    return _process


def init():
    """Reads this process's task from its environment (TF_CONFIG, the secret
    from PSTRAIN_SECRET_FILE, PSTRAIN_RUN_DIR, the job's PSTRAIN_FLAGS).
    A second call does nothing."""
    global _process
    if _process is not None:
        return
    _process = _Process(pstrain.Task.from_env())
    _install_exit_handlers()


def rank():
    """0 .. num_workers() - 1 over the chief and the workers; the chief is 0."""
    return _state().task.rank


def num_workers():
    return _state().task.num_workers


def is_chief():
    return _state().task.is_chief


def run_dir():
    """The job's run directory ("" for none)."""
    return _state().task.run_dir


def log_metrics(test_accuracy, test_loss=float("nan"), seconds=None):
    """The chief's evaluation on the test set, of the parameters the model
    holds: into evals.csv, TensorBoard and Prometheus (at an epoch's end
    also epochs.csv); the last one is summary.json's final_test_accuracy.
    `seconds`: how long the evaluation took (default: the time since the
    last step). On a worker that is not the chief it does nothing."""
    state = _state()
    if state.optimizer is None:
        raise UsageError("log_metrics: make the DistributedOptimizer first")
    state.optimizer._worker.log_evaluation(  # pylint: disable=protected-access
        float(test_accuracy), float(test_loss), -1.0 if seconds is None else float(seconds))


def finish():
    """Once every step is done: waits until every worker has pushed its
    last gradient; the chief's model then holds the job's final
    parameters (evaluate it, log_metrics, and the summary has them). Called
    at exit when the script does not."""
    state = _state()
    if state.optimizer is not None:
        state.optimizer.finish()


def _install_exit_handlers():
    previous = sys.excepthook

    def excepthook(kind, value, traceback):
        _process.failed = True
        previous(kind, value, traceback)
        if isinstance(value, ConfigError):
            # Bad configuration fails the same way every time: exit 2, which
            # `pstrain launch` does not restart.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(2)  # pylint: disable=protected-access

    sys.excepthook = excepthook
    atexit.register(_at_exit)


def _say(text):
    """One line on the worker's standard error, at once."""
    sys.stderr.write("pstrain: %s\n" % text)
    sys.stderr.flush()


def _at_exit():
    # A script that raised fails as it is; one that ended ends the job.
    opt = _process.optimizer if _process is not None else None
    if opt is None or _process.failed:
        return
    try:
        opt.finish()
        opt.close()
        # Its connections and heartbeat thread go now, not in the
        # interpreter's teardown.
        opt._worker.free()  # pylint: disable=protected-access
    except PstrainError as e:
        _say("at exit: %s: %s" % (type(e).__name__, e))
        os._exit(2 if isinstance(e, ConfigError) else 1)  # pylint: disable=protected-access


class DistributedSampler:
    """This worker's share of a data set, step by step, as the C++ workers
    take theirs: each epoch one seeded permutation of [0, num_examples),
    the same on every worker; global batch s is positions [s*G, (s+1)*G)
    of it (G = num_workers x batch_size) and worker r takes every
    num_workers-th of those from r (as PyTorch's DistributedSampler
    interleaves). Every worker runs len(sampler) steps an epoch.

    batches(epoch) yields the index tensors of the epoch's steps from where
    the job is (a restarted worker resumes at its position; after a
    rollback to a checkpoint the steps since are yielded again), while the
    DistributedOptimizer's step moves it on. After the job's last step it
    waits for every worker's last gradient (DistributedOptimizer.finish), so
    that the chief's model then holds the final parameters. Without an
    optimizer (or with `follow_job=False`) it yields the whole epoch.

    `num_workers` and `rank` default to the task's (pst.init()); give them
    to take a share without a job (num_workers=1: one process's order).
    `device`: where the index tensors go (the data's device)."""

    def __init__(self, num_examples, batch_size, seed=1, num_workers=None, rank=None,
                 follow_job=True, device=None):
        if num_examples < 1 or batch_size < 1:
            raise ValueError("num_examples and batch_size must be >= 1")
        self.num_examples, self.batch_size = int(num_examples), int(batch_size)
        state = _process
        self.seed = int(seed)
        if num_workers is None:
            task = _state().task
            self.num_workers, self.rank = task.num_workers, task.rank
            if task.dynamic:
                # Dynamic workers: nobody splits the set; each draws its own
                # order of all of it (its rank in the seed).
                self.seed ^= (0x9E3779B97F4A7C15 * (task.rank + 1)) & (2**64 - 1)
                self.num_workers, self.rank = 1, 0
        else:
            self.num_workers, self.rank = int(num_workers), int(rank or 0)
        if not 0 <= self.rank < self.num_workers:
            raise ValueError("rank %d is not in [0, %d)" % (self.rank, self.num_workers))
        self.follow_job = follow_job and state is not None
        self.device = device
        self._cached = (None, None)

    def __len__(self):
        global_batch = self.num_workers * self.batch_size
        return (self.num_examples + global_batch - 1) // global_batch

    def permutation(self, epoch):
        if self._cached[0] != epoch:
            self._cached = (epoch, pstrain.permutation(self.num_examples, self.seed, epoch))
        return self._cached[1]

    def indices(self, epoch, step):
        """This worker's examples of step `step` of epoch `epoch`."""
        g = self.num_workers * self.batch_size
        chunk = self.permutation(epoch)[step * g:(step + 1) * g]
        idx = torch.from_numpy(numpy.ascontiguousarray(chunk[self.rank::self.num_workers]))
        return idx if self.device is None else idx.to(self.device)

    def batches(self, epoch):
        opt = _process.optimizer if self.follow_job and _process is not None else None
        if opt is None:
            for step in range(len(self)):
                yield self.indices(epoch, step)
            return
        if opt.steps_per_epoch != len(self):
            raise UsageError("the sampler has %d steps an epoch, the optimizer's job %d: give the "
                             "optimizer sampler=" % (len(self), opt.steps_per_epoch))
        while not opt.done:
            position = opt.global_step
            data_epoch, step = divmod(position, len(self))
            if data_epoch > epoch:
                return
            idx = self.indices(data_epoch, step)
            opt._next_examples = len(idx)  # pylint: disable=protected-access
            yield idx
            if opt.global_step == position and not opt.done:
                raise UsageError("a batch of the sampler went by without opt.step(): call it "
                                 "once for each batch")
        # The job's last step is done: once every worker's last gradient is
        # in, the chief's model holds the final parameters (to evaluate).
        opt.finish()

    def __iter__(self):
        return self.batches(0)


# How often a worker saves its buffers (BatchNorm's statistics) into the
# run directory, besides when it finishes: a restarted worker starts from
# them (DistributedOptimizer._load_buffers).
_BUFFERS_EVERY_S = 30.0

# The ps's optimizers and the options of each (PyTorch's names), as the
# job's flags spell them.
_OPTIMIZERS = {
    "sgd": {"momentum": "momentum", "nesterov": "nesterov", "weight_decay": "weight_decay"},
    "adam": {"weight_decay": "weight_decay", "eps": "eps"},
    "adamw": {"weight_decay": "weight_decay", "eps": "eps"},
    "adagrad": {"weight_decay": "weight_decay", "eps": "eps", "lr_decay": "adagrad_lr_decay",
                "initial_accumulator_value": "adagrad_initial_accumulator"},
}

_SCHEDULE = {"warmup_steps": "warmup_steps", "step_size": "lr_step_size", "gamma": "lr_gamma",
             "min_lr": "min_lr"}


def _unix_us():
    """The Unix clock in microseconds, as the timeline's spans are."""
    return time.time_ns() // 1000


class DistributedOptimizer:
    """The model's parameters, trained by the job's ps tasks.

    optimizer: "sgd" | "adam" | "adamw" | "adagrad", applied by the ps with
      PyTorch's definitions; lr (default: the job's --lr, else sgd 0.01 x
      number of workers, adam/adamw 1e-3, adagrad 1e-2) and the options of
      torch.optim's class of that name: momentum, nesterov, weight_decay
      (sgd); betas, eps, weight_decay (adam, adamw: decoupled);
      lr_decay, initial_accumulator_value, eps, weight_decay (adagrad).
    lr_schedule: "constant" | "step" | "cosine" per update on the ps, after
      warmup_steps of linear warm-up; step: step_size, gamma; cosine: min_lr
      at the job's last update.
    The job's length, for the schedule and the step log: sampler= (its
      steps an epoch and batch size) or steps_per_epoch=, and epochs= (or
      total_steps=). Without either, the job ends when the script does
      (its workers must then run the same number of steps).
    backward_passes_per_step: backward passes whose gradients add up to one
      step (gradient accumulation).

    Joins the job: the chief's model holds the job's initial parameters,
    every other worker's model gets them (as Horovod broadcasts rank 0's);
    a restarted worker's model gets the job's current ones.
    """

    def __init__(self, model, optimizer="sgd", lr=None, sampler=None, epochs=None,
                 steps_per_epoch=None, total_steps=None, lr_schedule=None,
                 backward_passes_per_step=1, named_parameters=None, **options):
        state = _state()
        if state.optimizer is not None:
            raise UsageError("a process has one DistributedOptimizer")
        job = self._job_options(optimizer, lr, lr_schedule, options)
        if sampler is not None:
            steps_per_epoch = len(sampler) if steps_per_epoch is None else steps_per_epoch
            job["batch_size"] = sampler.batch_size
        if steps_per_epoch is not None:
            job["steps_per_epoch"] = int(steps_per_epoch)
        if epochs is not None:
            job["epochs"] = int(epochs)
        if total_steps is not None:
            job["total_steps"] = int(total_steps)
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        named = list(named_parameters if named_parameters is not None
                     else model.named_parameters())
        self._named = [(n, p) for n, p in named if p.requires_grad]
        if not self._named:
            raise ConfigError("the model has no parameter that requires a gradient")
        self._check_parameters()
        self._model = model
        self._passes = int(backward_passes_per_step)
        self._make_buffers()
        job["device"] = str(self._device)
        job.setdefault("model", "pytorch")
        self._worker = pstrain.Worker(state.task, [(n, p.numel()) for n, p in self._named],
                                      self._host_params, self._host_grads, job)
        self._after_pull()
        self._hooks = []
        self._pending = None    # the passes each tensor still waits for this step
        self._in_step = False
        self._next_examples = None  # this step's batch size, when known
        self._step_start = None
        self._finished = self._closed = self._job_finished = False
        self._position = self._worker.position()
        self._buffers_path = (os.path.join(state.task.run_dir, "buffers", "worker%d.pt" % rank())
                              if state.task.run_dir else None)
        self._buffers_saved = time.monotonic()
        self._buffers_failed = False
        if self._position[0] > 0:
            self._load_buffers()
        self._install_hooks(model)
        self.start_epoch = self._position[0] // self._position[2]
        state.optimizer = self

    @staticmethod
    def _job_options(optimizer, lr, lr_schedule, options):
        if optimizer not in _OPTIMIZERS:
            raise ConfigError("optimizer %r: expected one of %s" % (optimizer, ", ".join(_OPTIMIZERS)))
        job = {"optimizer": optimizer}
        if lr is not None:
            job["lr"] = float(lr)
        allowed = dict(_OPTIMIZERS[optimizer], **_SCHEDULE)
        for key, value in options.items():
            if key == "betas" and optimizer in ("adam", "adamw"):
                job["beta1"], job["beta2"] = float(value[0]), float(value[1])
            elif key in allowed:
                job[allowed[key]] = value
            else:
                raise ConfigError("%s takes no option %r (it takes lr, %s)"
                                  % (optimizer, key, ", ".join(sorted(list(allowed) + (
                                      ["betas"] if optimizer in ("adam", "adamw") else [])))))
        if lr_schedule is not None:
            job["lr_schedule"] = lr_schedule
        return job

    def _own_buffers(self):
        """The model's buffers that its state_dict holds (BatchNorm's
        running statistics and batch count), by name."""
        names = {name for name, _ in self._model.named_buffers()}
        return {k: v for k, v in self._model.state_dict().items() if k in names}

    def _save_buffers(self):
        """This worker's buffers into the run directory, whole or not at
        all (a temporary file renamed); a failure (a full disk) is said
        once and training goes on."""
        self._buffers_saved = time.monotonic()
        buffers = self._own_buffers()
        if self._buffers_path is None or not buffers:
            return
        # Its own temporary file: a predecessor presumed dead but still
        # running writes the same path.
        tmp = "%s.%d.tmp" % (self._buffers_path, os.getpid())
        try:
            os.makedirs(os.path.dirname(self._buffers_path), exist_ok=True)
            torch.save({"step": self._position[0],
                        "buffers": {k: v.detach().to("cpu", copy=True) for k, v in buffers.items()}},
                       tmp)
            os.replace(tmp, self._buffers_path)
        except Exception as e:  # pylint: disable=broad-except
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if not self._buffers_failed:
                self._buffers_failed = True
                _say("cannot save this worker's buffers to %s (%s); training goes on, a "
                     "restart would start them afresh" % (self._buffers_path, e))

    def _load_buffers(self):
        """The buffers a predecessor of this worker saved, into the model,
        when they are this model's; else they stay as the model made them."""
        path = self._buffers_path
        buffers = self._own_buffers()
        if path is None or not buffers:
            return

        def afresh(why):
            _say("%s: %s; this worker's buffers start afresh" % (path, why))

        if not os.path.exists(path):
            return afresh("none saved")
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # pylint: disable=broad-except
            return afresh("unreadable (%s: %s)" % (type(e).__name__, e))
        kept = saved.get("buffers") if isinstance(saved, dict) else None
        if not isinstance(kept, dict) or set(kept) != set(buffers) or any(
                not torch.is_tensor(kept[k]) or kept[k].shape != v.shape or kept[k].dtype != v.dtype
                for k, v in buffers.items()):
            return afresh("not this model's buffers")
        with torch.no_grad():
            for k, v in buffers.items():
                v.copy_(kept[k])
        _say("this worker's %d buffers from %s (saved at step %s)"
             % (len(buffers), path, saved.get("step")))
        return None

    def _check_parameters(self):
        devices = {p.device for _, p in self._named}
        if len(devices) != 1:
            raise ConfigError("the parameters are on several devices (%s); pstrain trains a "
                              "model on one" % ", ".join(sorted(map(str, devices))))
        self._device = devices.pop()
        for name, p in self._named:
            if p.dtype != torch.float32:
                raise ConfigError("parameter %s is %s; pstrain trains float32 parameters"
                                  % (name, p.dtype))

    def _make_buffers(self):
        total = sum(p.numel() for _, p in self._named)
        cuda = self._device.type == "cuda"
        # The library's buffers: host memory (pinned for a CUDA model, so
        # that the copies to and from the device are fast).
        flat_params = torch.empty(total, dtype=torch.float32, pin_memory=cuda)
        flat_grads = torch.zeros(total, dtype=torch.float32, pin_memory=cuda)
        self._offsets = []
        offset = 0
        with torch.no_grad():
            for _, p in self._named:
                n = p.numel()
                flat_params[offset:offset + n].copy_(p.reshape(-1))
                self._offsets.append((offset, n))
                offset += n
        self._flat_params, self._flat_grads = flat_params, flat_grads
        self._host_params, self._host_grads = flat_params.numpy(), flat_grads.numpy()
        # The model's tensors: views of the flat buffers (CPU), or of one
        # flat buffer on the device (CUDA).
        self._device_params = torch.empty(total, device=self._device) if cuda else flat_params
        self._device_grads = torch.zeros(total, device=self._device) if cuda else flat_grads
        for (_, p), (offset, n) in zip(self._named, self._offsets):
            p.data = self._device_params[offset:offset + n].view_as(p)
            p.grad = self._device_grads[offset:offset + n].view_as(p)

    def _after_pull(self):
        if self._device.type == "cuda":
            self._device_params.copy_(self._flat_params, non_blocking=False)

    def _grad_view(self, i):
        offset, n = self._offsets[i]
        return self._device_grads[offset:offset + n].view_as(self._named[i][1])

    def _install_hooks(self, model):
        # Horovod's way: the AccumulateGrad node of each parameter runs its
        # hooks once the parameter's gradient is in .grad.
        self._accumulators = []
        for i, (_, p) in enumerate(self._named):
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(accumulator.register_hook(self._make_hook(i)))
            self._accumulators.append(accumulator)
        self._hooks.append(model.register_forward_pre_hook(self._forward_pre_hook))
        self._spans = None
        # On a GPU the hooks would time kernel launches, not the layers'
        # work: no layer spans there (as the C++ CUDA model has none).
        if self._worker.timeline and self._device.type != "cuda":
            self._install_layer_spans(model)

    def _install_layer_spans(self, model):
        """--timeline: spans of the step for the timeline, as the C++ model
        draws its layers: each leaf module's forward, and the backward of
        each with parameters of its own (from its output's gradient to the
        last of its parameters' gradients; with backward_passes_per_step > 1,
        the last pass's). Only then: the hooks cost. A TorchScript module
        takes no hooks: it and what it holds are left out."""
        self._spans = []               # (name, backward, start us, duration us)
        self._forward_start = {}
        self._backward_start = {}      # module name -> when its output's gradient came
        self._accumulated = {}         # tensor index -> when its gradient was final
        self._module_params = []       # (name, [tensor index]) of modules with parameters
        index = {id(p): i for i, (_, p) in enumerate(self._named)}
        scripted = [name for name, module in model.named_modules()
                    if isinstance(module, torch.jit.ScriptModule)]
        for name, module in model.named_modules():
            if not name or next(module.children(), None) is not None:
                continue
            if any(name == s or name.startswith(s + ".") for s in scripted):
                continue
            own = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
            if own:
                self._module_params.append((name, own))
            self._hooks.append(module.register_forward_pre_hook(self._span_start(name)))
            self._hooks.append(module.register_forward_hook(self._span_end(name, bool(own))))

    @staticmethod
    def _training(module):
        """Whether `module` runs a training pass (not an evaluation)."""
        return module.training and torch.is_grad_enabled()

    def _span_start(self, name):
        def hook(module, _inputs):
            if self._training(module):
                self._forward_start[name] = _unix_us()
        return hook

    def _span_end(self, name, has_params):
        def hook(module, _inputs, output):
            start = self._forward_start.pop(name, None)
            if start is None or not self._training(module):
                return
            self._spans.append((name, False, start, _unix_us() - start))
            if has_params and torch.is_tensor(output) and output.requires_grad:
                def backward_started(_grad):
                    self._backward_start[name] = _unix_us()
                output.register_hook(backward_started)
        return hook

    def _send_spans(self):
        """The step's spans to the timeline, before the step ends."""
        for name, own in self._module_params:
            start = self._backward_start.get(name)
            end = max((self._accumulated[i] for i in own if i in self._accumulated), default=None)
            if start is not None and end is not None and end >= start:
                self._spans.append((name, True, start, end - start))
        try:
            for name, backward, start, duration in self._spans:
                self._worker.layer_span(name, backward, start, duration)
        finally:
            self._spans.clear()
            self._backward_start.clear()
            self._accumulated.clear()

    def _forward_pre_hook(self, module, inputs):
        if not self._training(module) or self._in_step:
            return
        if self._next_examples is None and inputs and torch.is_tensor(inputs[0]) \
                and inputs[0].dim() > 0:
            self._next_examples = int(inputs[0].shape[0])
        self._begin_step()

    def _make_hook(self, i):
        def hook(*_):
            self._tensor_ready(i)
        return hook

    def _begin_step(self):
        if self._in_step:
            return
        if self._job_finished or self._finished:
            raise UsageError("the job is done: no step is left")
        self._step_start = time.monotonic()
        examples = self._next_examples if self._next_examples is not None else 1
        self._worker.begin_step(examples)
        self._pending = [self._passes] * len(self._named)
        self._in_step = True

    def _tensor_ready(self, i):
        if not self._in_step:
            self._begin_step()
        p = self._named[i][1]
        view = self._grad_view(i)
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            # zero_grad(set_to_none=True) or a user's own .grad: back into
            # the flat buffer.
            with torch.no_grad():
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad)
            p.grad = view
        self._pending[i] -= 1
        if self._spans is not None:
            self._accumulated[i] = _unix_us()
        if self._pending[i] != 0:
            return
        if self._device.type == "cuda":
            offset, n = self._offsets[i]
            self._flat_grads[offset:offset + n].copy_(view.reshape(-1), non_blocking=False)
        self._worker.tensor_ready(i)

    # -- what a training loop calls ------------------------------------------

    def zero_grad(self, set_to_none=False):  # pylint: disable=unused-argument
        """Zeroes every gradient in place (the flat buffer the hooks send;
        set_to_none is accepted and treated as False)."""
        self._device_grads.zero_()
        for i, (_, p) in enumerate(self._named):
            if p.grad is None or p.grad.data_ptr() != self._grad_view(i).data_ptr():
                p.grad = self._grad_view(i)

    def step(self, closure=None, loss=None):
        """Sends the rest of this step's gradient and waits for the ps's
        new parameters, which the model then holds. `closure` as
        torch.optim's (it computes the loss: zero_grad, forward,
        backward); a tensor or a number in its place (or loss=) is the
        step's loss, for the step log. Returns the loss."""
        if closure is not None and not callable(closure):
            closure, loss = None, closure
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._job_finished:
            return loss
        if not self._in_step:
            self._begin_step()
        value = float(loss.detach()) if torch.is_tensor(loss) else (
            float(loss) if loss is not None else float("nan"))
        if self._device.type == "cuda":
            for i, left in enumerate(self._pending):
                if left > 0:  # never reached by backward: sent as it is
                    offset, n = self._offsets[i]
                    self._flat_grads[offset:offset + n].copy_(
                        self._grad_view(i).reshape(-1), non_blocking=False)
        if self._spans is not None:
            self._send_spans()
        self._in_step = False
        self._next_examples = None
        try:
            self._worker.end_step(value if math.isfinite(value) else float("nan"))
        except JobFinished:
            self._job_finished = True
            self._save_buffers()
            return loss
        self._after_pull()
        self._position = self._worker.position()
        if time.monotonic() - self._buffers_saved > _BUFFERS_EVERY_S:
            self._save_buffers()
        return loss

    @property
    def global_step(self):
        """The next step this worker computes: where the job is for it."""
        return self._position[0]

    @property
    def total_steps(self):
        return self._position[1]

    @property
    def steps_per_epoch(self):
        return self._position[2]

    @property
    def done(self):
        """Whether this worker has no step left."""
        return self._job_finished or self._finished or self._position[3]

    def finish(self):
        """Once every step is done: waits until every worker has pushed its
        last gradient; the chief's model then holds the final parameters.
        Nothing the second time."""
        if self._finished or self._job_finished:
            return
        try:
            self._worker.finish()
        except JobFinished:
            self._job_finished = True
            self._save_buffers()
            return
        self._finished = True
        self._after_pull()
        self._save_buffers()

    def close(self):
        """After finish: the chief writes summary.json and shuts the ps
        tasks down. Nothing the second time, or on a worker whose job
        finished without it."""
        if self._closed or self._job_finished:
            return
        self._closed = True
        self._worker.close()

    def state_dict(self):
        """The model's parameters are the job's (on the ps, checkpointed
        there); there is no optimizer state on the worker."""
        return {}
