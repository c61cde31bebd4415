"""DistributedOptimizer: a torch.optim.Optimizer whose step is the ps's.

The contract with the script: its loop means what it means in one process
(one worker) and under DDP (N sync workers), to float rounding.
 - After backward() .grad holds the gradient to step with: this worker's,
   or in sync with several workers the workers' average, as DDP's does
   (so clip_grad_norm_, GradScaler's unscale_ and its inf check see the
   whole global batch's gradient).
 - step() sends what .grad holds then (clipped, unscaled, edited), with
   what param_groups hold then (the scheduler's lr, momentum, betas, each
   group's weight decay), and the tensors whose .grad is None, which the ps
   leaves alone as torch.optim does. The model then holds the ps's new
   parameters.
 - state_dict() and load_state_dict() are torch.optim's format of the
   optimizer the ps runs.
"""

import collections
import contextlib
import copy
import inspect
import threading
import weakref

import torch

import pstrain
from pstrain._lib import ConfigError, JobFinished, UsageError

from . import _groups, _process
from ._buffers import ModelBuffers
from ._flat import Entry, FlatParameters, check_device
from ._process import JobDone, say
from ._timeline import LayerSpans, training

# The ps-side schedule's options (lr_schedule=; the job's --lr_schedule).
_SCHEDULE = {"warmup_steps": "warmup_steps", "step_size": "lr_step_size", "gamma": "lr_gamma",
             "min_lr": "min_lr"}


class _StateOnPs(collections.defaultdict):
    """Optimizer.state once the job has begun: the ps tasks hold it, and a
    read says where it is instead of finding nothing."""

    def __init__(self):
        super().__init__(dict)

    def __reduce__(self):  # copy.deepcopy, pickle: an empty one
        return (_StateOnPs, ())

    def __missing__(self, key):
        raise UsageError("opt.state: the optimizer's state is on the ps tasks once the job has "
                         "begun; opt.state_dict()['state'] reads it")


# zero_grad()'s default: False in PyTorch 1.13, True from 2.0.
_ZERO_GRAD_DEFAULT = inspect.signature(torch.optim.Optimizer.zero_grad).parameters[
    "set_to_none"].default


def _no_hook(*_):
    """What a copy of the model (copy.deepcopy, torch.save) has for the
    optimizer's hooks: the copy is not the job's model."""
    return None


class _ModelHook:
    """A hook on the model that calls an optimizer's method, held weakly: a
    copy of the model (an EMA's or a mean teacher's copy.deepcopy, a
    torch.save of the whole module) gets _no_hook, not a copy of the
    optimizer."""

    def __init__(self, method):
        self._method = weakref.WeakMethod(method)

    def __call__(self, *args):
        method = self._method()
        return method(*args) if method is not None else None

    def __deepcopy__(self, memo):
        method = self._method()
        if method is not None:
            method.__self__._model_copied()  # pylint: disable=protected-access
        return _no_hook

    def __reduce__(self):
        return (_name_no_hook, ())


def _name_no_hook():
    return _no_hook


def _rows_of(output, depth=0):
    """The first dimension of the first tensor of at least one dimension in
    a forward's output (a tensor, a tuple or list, a dict such as Hugging
    Face's ModelOutput), or None."""
    if torch.is_tensor(output):
        return int(output.shape[0]) if output.dim() > 0 else None
    if depth > 2:
        return None
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        for item in output[:8]:
            rows = _rows_of(item, depth + 1)
            if rows is not None:
                return rows
    return None


class DistributedOptimizer(torch.optim.Optimizer):
    """The model's parameters, trained by the job's ps tasks.

    DistributedOptimizer(model, torch.optim.AdamW(groups, lr=3e-4, ...))
      wraps a torch.optim optimizer (SGD, Adam, AdamW or Adagrad; the ps
      applies it with PyTorch's definitions): its param_groups, with their
      own options, are this optimizer's. Horovod's order works too:
      DistributedOptimizer(optimizer, named_parameters=..., model=...).
    DistributedOptimizer(model, "sgd", lr=0.01, momentum=0.9, ...)
      the same with the optimizer named ("sgd", "adam", "adamw",
      "adagrad") and its torch.optim options; lr defaults to the job's
      --lr, else the job's default rule.

    model: its forward starts a step (and gives the batch size), its
      buffers (BatchNorm's) are saved for a restart, its leaf modules are
      the timeline's layers. Optional with a torch.optim optimizer.
    The job's length, for the step log and a ps-side schedule: sampler=
      (its steps an epoch and batch size) or steps_per_epoch=, and epochs=
      (or total_steps=). Without either the job ends when the scripts do,
      each worker when its own loop does (sync goes on without a worker
      that finished).
    lr_schedule: "constant" | "step" | "cosine" on the ps (with
      warmup_steps, step_size, gamma, min_lr), scaling each group's lr; or
      use torch's schedulers on this optimizer.
    average_gradients: whether backward() ends with the workers' average in
      .grad (sync, as DDP). Default: in sync jobs of several workers without
      backup workers. False sends each worker's own gradient, edited as the
      script edits it, to be averaged by the ps (one exchange less a step).
    backward_passes_per_step: average after every n-th backward only (a
      loop that accumulates n backward passes a step); or use no_sync().
    forward_ahead: async and ssp: step() sends the gradient and returns at
      once; the next step computes on the parameters the model holds (the
      step before's reply: each gradient is one update staler) while this
      step's reply comes in, and the model takes it at the next step(). A
      forward in eval mode, state_dict() (the model's and this one's),
      log_evaluation, done at the job's end, finish() and land() take the
      step in flight first (from the thread that made the optimizer), so
      an evaluation or a saved model is the newest; anything else that
      reads the weights between steps sees them one update behind.

    Joins the job at its first use (a forward, step, global_step,
    state_dict): the chief's model then holds the job's initial parameters,
    every other worker's model gets them (as Horovod broadcasts rank 0's);
    a restarted worker's model gets the job's current ones.
    """

    def __init__(self, model=None, optimizer="sgd", lr=None, sampler=None, epochs=None,
                 steps_per_epoch=None, total_steps=None, lr_schedule=None,
                 backward_passes_per_step=1, named_parameters=None, average_gradients=None,
                 forward_ahead=False, **options):
        state = _process.state()
        if state.optimizer is not None:
            raise UsageError("a process has one DistributedOptimizer")
        if isinstance(model, torch.optim.Optimizer):  # Horovod's order
            model, optimizer = options.pop("model", None), model
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        schedule = {_SCHEDULE[k]: options.pop(k) for k in list(options) if k in _SCHEDULE}
        inner = self._torch_optimizer(model, optimizer, lr, options, state.task)
        self._kind = _groups.kind_of(inner)
        _groups.check_groups(self._kind, inner.param_groups)
        self._making = True
        super().__init__(inner.param_groups, inner.defaults)
        self._making = False
        self._model = model
        self._task = state.task
        self._layout = self._make_layout(model, named_parameters, inner)
        self._flat = FlatParameters(self._layout, check_device([e.param for e in self._layout]))
        self._job = self._job_options(sampler, epochs, steps_per_epoch, total_steps, lr_schedule,
                                      schedule)
        self._ahead = bool(forward_ahead)
        # Landing calls the library: only from the thread that made the
        # optimizer, and not while its buffers are read for saving.
        self._thread = threading.get_ident()
        self._quiet = False
        if self._ahead:
            self._job["forward_ahead"] = True
        job = self._task.describe_job(self._job)
        self.seed = int(job["seed"])
        self._tables = list(state.tables)
        self._sync_average = self._averaging(average_gradients, job)
        self._passes_per_step = int(backward_passes_per_step)
        self._loaded_state = bool(inner.state)
        if self._loaded_state:
            self.state = collections.defaultdict(dict, inner.state)
        self._worker = None
        self._position = (0, 0, 1, False)
        self._rejoins = 0  # the worker's rejoins when the parameters last came
        self._in_step = False
        # A worker's examples in a step (_count_examples): those expect_examples
        # gave, else the rows of each backward pass's forward.
        self._explicit_examples = None  # expect_examples(n), for the step
        self._forward_examples = None   # the last forward's rows no pass counted yet
        self._forward_input = None      # the model's first positional input, during its forward
        self._pass_examples = 0         # the rows the step's accumulation's passes ran on
        self._accumulated = False       # the last pass ended an accumulation
        self._passes = 0          # backward passes in the step under way
        self._reduced = False     # .grad holds an average of the last pass
        self._nothing = False     # the step has no gradient of this worker's (_join_average)
        self._absent_all = False  # nor any tensor (skip_step, finish; _no_grads)
        self._step_examples = 1   # the step's examples as the library has them
        self._copied_early = False  # the model deep-copied before _join (_model_copied)
        self._schedulers = []     # fast_forward's: (scheduler, its state as made)
        self._groups_made = []    # param_groups' settings when they were given
        self._no_sync = False
        self._callback_queued = False
        self._finished = self._closed = self._job_finished = False
        self._spans = None
        self._hooks = []
        self._accumulators = {}   # tensor index -> its AccumulateGrad node (kept alive)
        self._install_hooks()
        run_dir = state.task.run_dir
        self._buffers = ModelBuffers(model, None if not run_dir else "%s/buffers/worker%d.pt"
                                     % (run_dir, state.task.rank))
        state.optimizer = self

    # -- construction ---------------------------------------------------------

    @staticmethod
    def _torch_optimizer(model, optimizer, lr, options, task):
        """The torch.optim optimizer this one runs: the one given, or made
        from its name and options."""
        if isinstance(optimizer, torch.optim.Optimizer):
            if lr is not None or options:
                raise ConfigError("give the options to the torch.optim optimizer itself, not to "
                                  "DistributedOptimizer (got %s)"
                                  % ", ".join(["lr"] * (lr is not None) + sorted(options)))
            return optimizer
        if not isinstance(optimizer, str) or optimizer not in _groups.CLASSES:
            raise ConfigError("optimizer %r: expected one of %s, or a torch.optim optimizer"
                              % (optimizer, ", ".join(_groups.NAMES)))
        if model is None:
            raise ConfigError("DistributedOptimizer(model, %r, ...) needs the model" % optimizer)
        cls = _groups.CLASSES[optimizer]
        takes = [name for name in inspect.signature(cls.__init__).parameters
                 if name not in ("self", "params")]
        for key in options:
            if key not in takes:
                raise ConfigError("%s takes no option %r (it takes %s)"
                                  % (optimizer, key, ", ".join(takes)))
        # None: the job's default, as for lr.
        given = {k: v for k, v in dict(options, lr=lr).items() if v is not None}
        # The job's defaults for the options not given: SGD's lr follows
        # the mode and the momentum (docs/training.md), so a given momentum
        # goes into the question.
        asked = {"optimizer": optimizer}
        if optimizer == "sgd" and "momentum" in given:
            asked["momentum"] = given["momentum"]
        kwargs = _groups.torch_options(optimizer, task.describe_job(asked))
        kwargs.update(given)
        try:
            return cls(list(model.parameters()), **kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError("%s: %s" % (optimizer, e)) from None

    def _make_layout(self, model, named_parameters, inner):
        """The parameters the ps trains: every parameter of every group (a
        frozen one too: it is updated once it has a gradient), but those of
        no values, in the groups' order."""
        names = {}
        for source in (named_parameters, model.named_parameters() if model is not None else ()):
            for name, p in (source or ()):
                names.setdefault(id(p), name)
        layout, offset, seen = [], 0, set()
        initial = float(inner.defaults.get("initial_accumulator_value", 0.0))
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(group["params"]):
                if p.numel() == 0:
                    continue
                name = names.get(id(p), "param_groups[%d][%d]" % (g, i))
                if id(p) in seen:
                    raise ConfigError("parameter %s is in the optimizer twice (torch.optim would "
                                      "update it twice a step); list it once" % name)
                seen.add(id(p))
                layout.append(Entry(p, name, g, offset, initial))
                offset += p.numel()
        if not layout:
            raise ConfigError("the optimizer has no parameter with values to train")
        return layout

    def _job_options(self, sampler, epochs, steps_per_epoch, total_steps, lr_schedule, schedule):
        job = _groups.job_options(self._kind, self.param_groups)
        job.update(schedule)
        if lr_schedule is not None:
            job["lr_schedule"] = lr_schedule
        if sampler is not None:
            steps_per_epoch = len(sampler) if steps_per_epoch is None else steps_per_epoch
            job["batch_size"] = sampler.batch_size
        if steps_per_epoch is not None:
            job["steps_per_epoch"] = int(steps_per_epoch)
        if epochs is not None:
            job["epochs"] = int(epochs)
        if total_steps is not None:
            job["total_steps"] = int(total_steps)
        job["device"] = str(self._flat.device)
        job.setdefault("model", "pytorch")
        job["tensor_groups"] = [e.group for e in self._layout]
        tables = _process.state().tables
        if tables:
            job["embedding_tables"] = [t.config for t in tables]
        return job

    def _averaging(self, asked, job):
        sync = job["mode"] == "sync" and job["backup_workers"] == 0 and not self._task.dynamic
        if asked is None:
            return sync and job["num_workers"] > 1
        if asked and not sync:
            raise ConfigError("average_gradients=True: the workers' average before step() is "
                              "for sync jobs without backup workers (this job: %s%s)"
                              % (job["mode"], ", %d backup workers" % job["backup_workers"]
                                 if job["backup_workers"] else ""))
        return bool(asked)

    def add_param_group(self, param_group):
        if not getattr(self, "_making", True):
            raise ConfigError(
                "the parameter groups are the ps's layout, fixed once the optimizer is made: put "
                "every parameter in a group when making it (a frozen one with requires_grad="
                "False is not updated until it has a gradient)")
        super().add_param_group(param_group)

    # -- hooks ------------------------------------------------------------------

    def _install_hooks(self):
        if self._model is not None:
            try:
                self._hooks.append(self._model.register_forward_pre_hook(
                    _ModelHook(self._forward_pre_hook)))
                self._hooks.append(self._model.register_forward_hook(
                    _ModelHook(self._forward_hook)))
                for module in self._model.modules():
                    if isinstance(module, torch.nn.EmbeddingBag):
                        self._hooks.append(module.register_forward_pre_hook(
                            _ModelHook(self._embedding_bag_pre_hook)))
            except (RuntimeError, AttributeError) as e:
                say("cannot hook the model's forward (%s): each step starts at its backward"
                    % e)
            # Forward ahead: the model's state_dict holds the newest weights
            # (its tensors share the parameters' memory, which land() fills).
            state_hook = getattr(self._model, "_register_state_dict_hook", None)
            if self._ahead and state_hook is not None:
                self._hooks.append(state_hook(_ModelHook(self._land_for_state_dict)))
        self._hook_parameters()

    def _hook_parameters(self):
        """Horovod's way: the AccumulateGrad node of each parameter runs its
        hooks once the parameter's gradient is in .grad. Parameters made
        trainable later (unfrozen) are hooked when a step begins."""
        if len(self._accumulators) == len(self._layout):
            return  # every one hooked
        unhooked = [t for t, e in enumerate(self._layout)
                    if t not in self._accumulators and e.param.requires_grad]
        if not unhooked:
            return
        with torch.enable_grad():
            for t in unhooked:
                param = self._layout[t].param
                accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
                self._hooks.append(accumulator.register_hook(self._make_hook(t)))
                self._accumulators[t] = accumulator

    def _make_hook(self, t):
        def hook(*_):
            self._gradient_in(t)
        return hook

    def __setattr__(self, name, value):
        # A script's opt.state = ... (a reset of the optimizer's state) once
        # the job has begun would change nothing: the ps holds the state.
        if name == "state" and self.__dict__.get("_worker") is not None:
            raise UsageError("opt.state = ...: the optimizer's state is on the ps tasks once the "
                             "job has begun, and resetting it there is not something they do; "
                             "reset it before the first step, or start a new job")
        super().__setattr__(name, value)

    def _set_state(self, state):
        """Optimizer.state, set by this class itself (past __setattr__'s
        refusal of a script's reset)."""
        self.__dict__["state"] = state

    def _model_copied(self):
        """copy.deepcopy of the model (an EMA's, a mean teacher's): one made
        before the job's parameters came holds this worker's own, which
        _join compares with the job's."""
        if self._worker is None:
            self._copied_early = True

    def _land_for_state_dict(self, *_):
        self.land()

    def _forward_pre_hook(self, module, inputs):
        if torch.is_grad_enabled():
            # A forward whose output a backward pass may take: its rows
            # (the first dimension of the first positional input; without
            # one, of the output: _forward_hook).
            first = inputs[0] if inputs else None
            self._forward_examples = int(first.shape[0]) \
                if torch.is_tensor(first) and first.dim() > 0 else None
            self._forward_input = first
            if self._in_step and self._passes == 0:
                self._count_examples()  # a forward before it (one without backward)
        if not training(module):
            if not self._in_step:
                self.land()  # an evaluation sees the newest weights
            return
        if self._in_step:
            return
        self._begin_step()

    def _forward_hook(self, module, inputs, output):
        """The rows of a forward without a positional tensor input (a model
        called with keywords only, as Hugging Face's are): the first
        dimension of the first tensor of its output."""
        self._forward_input = None
        if self._forward_examples is None and torch.is_grad_enabled():
            rows = _rows_of(output)
            if rows is not None:
                self._forward_examples = rows
                if self._in_step and self._passes == 0:
                    self._count_examples()

    def _bags_of(self, ids, bags):
        """An embedding bag's forward (pst.Embedding's, nn.EmbeddingBag's)
        of 1-D ids with offsets: where those ids are the model's first
        positional input, the forward's rows are the `bags`, not the ids."""
        if ids is not self._forward_input or self._forward_examples is None:
            return
        self._forward_examples = bags
        if self._in_step and self._passes == 0:
            self._count_examples()

    def _embedding_bag_pre_hook(self, module, inputs):
        if len(inputs) > 1 and torch.is_tensor(inputs[1]) and torch.is_grad_enabled():
            bags = inputs[1].numel() - (1 if module.include_last_offset else 0)
            self._bags_of(inputs[0], bags)

    def _count_examples(self, backward_pass=False):
        """The step's examples: expect_examples' if given, else the rows of
        the forwards its last accumulation's backward passes ran on (each
        pass counts the last forward before it, once: a forward without
        one, an evaluation left in training mode, counts nothing; two
        passes of one forward count it once; the passes of one
        accumulation, under no_sync or backward_passes_per_step, add up).
        Before its first pass the step has the rows of the last forward (a
        provisional count, for a step that ends without one); the library
        learns of a change at once (a sync average weighs each worker's
        gradient by them)."""
        if self._explicit_examples is not None:
            examples = self._explicit_examples
        elif backward_pass:
            if self._accumulated:
                # The pass before ended an accumulation (its gradient was
                # averaged, or is the step's): this one starts another, as
                # a GradScaler's skipped step's next batch does after
                # zero_grad.
                self._pass_examples, self._accumulated = 0, False
            if self._forward_examples is not None:
                self._pass_examples += self._forward_examples
                self._forward_examples = None
            examples = self._pass_examples or self._step_examples
        elif self._passes == 0 and self._forward_examples is not None:
            examples = self._forward_examples
        else:
            return
        if examples != self._step_examples:
            self._step_examples = examples
            if self._in_step and not self._nothing:
                self._worker.set_step_examples(examples)

    def _gradient_in(self, t):
        """Tensor t's gradient of a backward pass is in .grad."""
        if not self._in_step:
            self._begin_step()
        if self._spans is not None:
            self._spans.gradient_final(t)
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)  # pylint: disable=protected-access

    def _backward_done(self):
        """The end of a backward pass (DDP's place for its last allreduce)."""
        self._callback_queued = False
        self._passes += 1
        self._reduced = False
        self._count_examples(backward_pass=True)
        self._accumulated = not self._no_sync and self._passes % self._passes_per_step == 0
        # A backward pass after the step joined an average without a
        # gradient (a GradScaler's skipped step, with the loop's next batch
        # merging into it): it has one of its own again.
        self._set_nothing(False)
        if self._sync_average and not self._no_sync and self._passes % self._passes_per_step == 0:
            self._reduce()

    def _no_gradient(self):
        """No gradient of this worker's in the step: no backward pass, every
        .grad None or zero (zero_grad's, set_to_none or not), and no
        pst.Embedding row with one."""
        if self._passes > 0:
            return False
        if any(t._has_gradient() for t in self._tables):  # pylint: disable=protected-access
            return False
        with torch.no_grad():
            return all(e.param.grad is None or not bool(e.param.grad.any())
                       for e in self._layout)

    def _join_average(self, absent_all=False):
        """Sync averaging: this worker's part of the step's average, which
        every worker must take or the others would wait for it forever
        (after a backward pass whose end did not average, with no_sync left
        on; without one: step() with no backward(), skip_step(), finish(),
        synchronize()). A step without a gradient of its own (`absent_all`,
        or _no_gradient()) adds nothing: its examples are out of the
        average and of the update, and it pushes zeros, every tensor
        absent (`absent_all`) or those whose .grad is None (no backward:
        where every worker is so, a zeroed .grad steps with zeros, as one
        process's does; _end_step has set _absent_all)."""
        if absent_all or self._no_gradient():
            self._set_nothing(True)
        self._reduce(nothing=self._nothing)

    def _no_grads(self):
        """Zeros for a step with nothing of this worker's (_join_average);
        returns the tensors absent."""
        return self._flat.no_grads(keep_present=not self._absent_all)

    def _set_nothing(self, nothing):
        """Whether the step has no gradient of this worker's: its examples
        are then 0 (out of the average and the update), else those it
        began with."""
        if nothing != self._nothing:
            self._nothing = nothing
            self._worker.set_step_examples(0 if nothing else self._step_examples)

    def _reduce(self, nothing=False):
        """.grad becomes the workers' average of what it holds (`nothing`:
        zeros, _no_grads)."""
        if not self._in_step:
            return
        absent = self._no_grads() if nothing else self._flat.gather_grads()
        try:
            reduced, everywhere = self._worker.reduce_gradients(absent)
        except JobFinished:
            # The job ended while this worker was away (frozen past the
            # chief's last step): its loop ends as at step().
            self._job_finished = True
            return
        if reduced:
            self._flat.scatter_grads(everywhere)
        self._reduced = True

    # -- the job ----------------------------------------------------------------

    def _join(self):
        if self._worker is not None:
            return
        slots = steps = None
        if self._loaded_state and self._task.is_chief:
            slots, steps = _groups.slots_from_state(self._kind, self.state, self._layout,
                                                    self._flat.total)
        self._flat.adopt()
        own = self._flat.host_params.clone() \
            if self._copied_early and not self._task.is_chief else None
        self._worker = pstrain.Worker(self._task, [(e.name, e.size) for e in self._layout],
                                      self._flat.host_params.numpy(),
                                      self._flat.host_grads.numpy(), self._job, slots, steps)
        self._took_parameters()
        # The comparison is with the job's initial parameters, which the
        # model holds only where no update was applied yet: a worker joining
        # a job under way (async, a restart, a resume) takes its current ones.
        if own is not None and self._worker.versions()[1] == 0 \
                and not torch.equal(own, self._flat.host_params):
            say("a copy of the model made before the optimizer's first use (copy.deepcopy: an "
                "EMA's, a teacher's) holds this worker's initial parameters, which differ from "
                "the job's (the chief's, which this worker's model now holds, as DDP broadcasts "
                "rank 0's): make the copy after the first step (or after reading "
                "opt.global_step, which joins the job), or give every worker the same seed")
        if self._position[0] > 0:
            self._buffers.load()
            if self._loaded_state:
                say("the job is under way (step %d): the optimizer's state is the job's, on the "
                    "ps; the state_dict loaded here is not used" % self._position[0])
        self._set_state(_StateOnPs())  # the ps holds it (state_dict() reads it)
        self._say_unshared()
        if self._worker.timeline and not self._flat.cuda and self._model is not None:
            index = {id(e.param): t for t, e in enumerate(self._layout)}
            self._spans = LayerSpans(self._model, index, self._hooks)

    def _say_unshared(self):
        """Says which of the model's parameters are in no parameter group:
        the ps does not hold them, so each worker keeps its own values (DDP
        would broadcast rank 0's); where the workers' differ (an unseeded
        script's frozen layer), so does what each trains."""
        if self._model is None or self._task.num_workers < 2:
            return
        held = {id(e.param) for e in self._layout}
        outside = [name for name, p in self._model.named_parameters()
                   if id(p) not in held and p.numel() > 0]
        if outside and self._task.is_chief:
            say("%d of the model's parameters are in no parameter group (%s%s): each worker "
                "keeps its own values of them, not the chief's; give every worker the same "
                "(the same seed, or weights loaded from a file), or put them in the optimizer "
                "with requires_grad=False" % (len(outside), ", ".join(outside[:5]),
                                               ", ..." if len(outside) > 5 else ""))

    def prefetched(self):
        """How many tables' reads pst.Embedding.prefetch answered so far (a
        forward whose rows came with the step before's reply)."""
        return self._worker.embedding_prefetched() if self._worker is not None else 0

    def _table_worker(self):
        """The worker, joined (pst.Embedding's rows)."""
        self._join()
        return self._worker

    def _table_call(self, call):
        """call(worker) for pst.Embedding's rows. Outside a step (an
        evaluation, read_rows) a rejoin inside it may rewrite the
        parameters: if it did, they are taken and noted as the step's are.
        """
        worker = self._table_worker()
        try:
            if self._in_step or self._finished or self._job_finished:
                return call(worker)
            with self._library_writes():
                return call(worker)
        except JobFinished:
            # The job ended while this worker was away: no rows to read.
            self._job_finished = True
            raise JobDone("the job finished while this worker was away (frozen or declared "
                          "dead): this worker's loop ends here") from None

    @contextlib.contextmanager
    def _library_writes(self):
        """Around a call outside a step that may rewrite the parameters (a
        rejoin inside it): if it rejoined, the parameters are taken and
        noted after it (else what the script did before it is still judged
        at the next step's end)."""
        before = self._worker.rejoins()
        try:
            yield
        finally:
            if self._worker.rejoins() != before:
                self._took_parameters()

    def _begin_step(self):
        if self._in_step or self._finished or self._job_finished:
            return
        self._join()
        if self._position[3]:
            return  # the job is done: step() says so
        if self._ahead:
            # Since the last step's parameters came: anything but .data
            # writes (an evaluation's forward lands the newest parameters
            # into whatever the script swapped in).
            self._refuse_changes(contents=False)
            self._flat.mark_versions()
        else:
            # A new tensor now; the values at the step's end (_end_step),
            # which covers the time since the parameters came.
            self._refuse_changes(replaced_only=True)
        self._hook_parameters()
        examples = self._explicit_examples
        if examples is None:
            examples = self._forward_examples if self._forward_examples is not None else 1
        self._step_examples = examples
        self._pass_examples, self._accumulated = 0, False
        try:
            self._worker.begin_step(self._step_examples)
        except JobFinished:
            self._job_finished = True
            return
        self._in_step = True
        self._passes = 0
        self._reduced = False
        self._nothing = False
        self._absent_all = False

    def _refuse_changes(self, contents=True, replaced_only=False):
        changed = self._flat.replaced() if replaced_only else self._flat.changed(contents)
        if changed:
            raise ConfigError(
                "the model's parameters changed after the job began (%s): by an in-place write "
                "(p.data.clamp_(), load_state_dict, reset_parameters, an nn.Embedding's "
                "max_norm) or a new tensor (p.data = ..., model.to(...)). The ps tasks hold the "
                "parameters, and the next step's would overwrite the change; pstrain.torch "
                "cannot train a loop that edits its parameters between steps or inside one: "
                "make such changes before the optimizer's first use (a forward, step(), "
                "global_step, done, start_epoch, state_dict()). Weights moved for a while (SAM, "
                "FGM, AWP, an EMA's for an evaluation) are taken back as they were with "
                "p.data.copy_(saved), not by arithmetic, which rounds. A step() of the "
                "torch.optim optimizer itself writes them too: call the DistributedOptimizer's"
                % ", ".join(changed[:5]))

    def expect_examples(self, n):
        """This worker's examples in the next step (or in the step a forward
        began, before its backward): a batch whose first dimension is not
        its rows (DistributedSampler gives its batch's)."""
        n = int(n)
        if n < 0:
            raise UsageError("expect_examples(%d): a count of examples is 0 or more" % n)
        self._explicit_examples = n
        if self._in_step and self._passes == 0:
            self._count_examples()

    def _end_step(self, loss, absent_all=False, judge=True):
        """Sends the step (what .grad and param_groups hold now) and takes
        the parameters that follow (`judge`: refusing what the script
        changed in the step; not at finish, whose error could not be
        raised)."""
        if judge:
            # What the script changed since the parameters came, .data
            # writes too (forward ahead: what moved a version in the
            # step). A rejoin in the step (a ps went away) rewrote them
            # with the job's, and voided the step: nothing to judge.
            if self._ahead:
                self._refuse_changes(contents=False)
            elif self._worker.rejoins() == self._rejoins:
                self._refuse_changes(contents=True)
            else:
                self._refuse_changes(replaced_only=True)
        if absent_all:
            self._absent_all = True
        if self._sync_average:
            if not self._reduced:
                self._join_average(absent_all)
            elif absent_all:
                # skip_step() or finish() after the step's average: its push
                # adds nothing (with its examples, zeros would dilute the
                # others' update).
                self._set_nothing(True)
            absent_all = self._nothing
        # absent_all: nothing of this worker's, zeros for a sync average
        # that other workers' gradients still make (_no_grads' tensors).
        absent = self._no_grads() if absent_all else self._flat.gather_grads()
        self._worker.set_step_options(_groups.group_settings(self._kind, self.param_groups),
                                      absent)
        if self._spans is not None:
            self._spans.send(self._worker)
        for table in self._tables:
            if absent_all:
                table._forget_step()  # pylint: disable=protected-access
            else:
                table._send_grad(self._worker)  # pylint: disable=protected-access
        self._in_step = False
        self._explicit_examples = self._forward_examples = None
        try:
            self._worker.end_step(loss)
        except JobFinished:
            self._job_finished = True
            self._buffers.save(self._position[0])
            return
        self._took_parameters(after_step=True)
        if self._buffers.due():
            with self._no_landing():
                self._buffers.save(self._position[0])

    # -- what a training loop calls ---------------------------------------------

    def zero_grad(self, set_to_none=_ZERO_GRAD_DEFAULT):
        """torch.optim's, and the pst.Embedding tables' row gradients too,
        as one process's zero_grad() clears an nn.EmbeddingBag(sparse=True)
        weight's."""
        super().zero_grad(set_to_none=set_to_none)
        for table in self._tables:
            table._zero_grad(set_to_none)  # pylint: disable=protected-access

    def step(self, closure=None, loss=None):
        """Sends this step's gradient (what each .grad holds now; a .grad of
        None leaves its parameter alone) with the settings param_groups hold
        now, and waits for the ps's new parameters, which the model then
        holds. `closure` as torch.optim's (zero_grad, forward, backward,
        returning the loss); a tensor or a number in its place (or loss=) is
        the step's loss, for the step log. Returns the loss. Raises JobDone
        when the job has no step left."""
        if closure is not None and not callable(closure):
            closure, loss = None, closure
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._job_finished:
            return loss
        self._begin_step()
        if not self._in_step:
            total = self._position[1]  # 2**40: a job of no set length (finish() ended it)
            raise JobDone("the job is done (step %d%s): this worker's loop ends here"
                          % (self._position[0], " of %d" % total if total < 1 << 40 else ""))
        value = float(loss.detach()) if torch.is_tensor(loss) else (
            float(loss) if loss is not None else float("nan"))
        self._end_step(value)
        return loss

    def skip_step(self):
        """A step that updates nothing (every .grad as if None): the job's
        position moves on, as a loop's does when GradScaler skips its step.
        The sampler calls it for a batch that went by without step()."""
        self._begin_step()
        if self._in_step:
            self._end_step(float("nan"), absent_all=True)

    def synchronize(self):
        """Horovod's: .grad holds the workers' average from here (it does
        already after backward when averaging; this averages a gradient
        made otherwise)."""
        if self._sync_average and self._in_step and not self._reduced:
            self._join_average()

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's: step() inside does not average again (it never does)."""
        yield

    @contextlib.contextmanager
    def no_sync(self):
        """DDP's: backward passes inside do not average; the gradient they
        accumulate is averaged with the next backward outside."""
        before, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = before

    @property
    def global_step(self):
        """The next step this worker computes: where the job is for it."""
        self._join()
        return self._position[0]

    @property
    def total_steps(self):
        self._join()
        return self._position[1]

    @property
    def steps_per_epoch(self):
        self._join()
        return self._position[2]

    @property
    def start_epoch(self):
        """The epoch the job is in (a restarted worker's loop starts there)."""
        self._join()
        return self._position[0] // self._position[2]

    @property
    def done(self):
        """Whether this worker has no step left (computing ahead: the step
        in flight lands first, as a rejoin there may move the job back)."""
        if self._job_finished or self._finished:
            return True
        self._join()
        if self._position[3] and self._ahead:
            self.land()
            return self._job_finished or self._position[3]
        return self._position[3]

    def fast_forward(self, *schedulers):
        """Schedulers stepped once a step (torch's LambdaLR, OneCycleLR,
        CosineAnnealingLR and the like), made afresh, follow the job's
        position: a restarted worker's step global_step times now (nothing
        in a fresh job), and where the job goes back to a checkpoint (a ps
        restarted from it) they are set back with it, so that each step
        runs with the settings one process would give it. Give every such
        scheduler, in one call, before the loop."""
        for s in schedulers:
            try:
                inspect.signature(s.step).bind()
            except (TypeError, ValueError) as e:
                raise UsageError(
                    "opt.fast_forward(%s): it takes schedulers stepped once a step without an "
                    "argument (%s); a scheduler stepped on a metric, as ReduceLROnPlateau is, "
                    "cannot be replayed to the job's step" % (type(s).__name__, e)) from None
        if not self._schedulers:
            self._groups_made = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                                 for g in self.param_groups]
        for s in schedulers:
            try:
                self._schedulers.append((s, copy.deepcopy(s.state_dict())))
            except Exception as e:  # pylint: disable=broad-except
                say("cannot keep %s's state as made (%s): it catches up here, but does not go "
                    "back with the job where a ps restarts from its checkpoint"
                    % (type(s).__name__, e))
        for _ in range(self.global_step):
            for s in schedulers:
                s.step()

    def _rewind_schedulers(self, steps):
        """fast_forward's schedulers as made, then stepped `steps` times (-1:
        one step before that, as after a step() that went back to 0, the
        loop's own scheduler step to come)."""
        for group, made in zip(self.param_groups, self._groups_made):
            group.update(copy.deepcopy(made))
        for s, made in self._schedulers:
            s.load_state_dict(copy.deepcopy(made))
        for _ in range(steps):
            for s, _ in self._schedulers:
                s.step()
        if steps < 0:
            for s, _ in self._schedulers:
                s.last_epoch = -1

    def finish(self):
        """Once this worker's loop is over: a step begun but not stepped is
        ended without an update (as GradScaler's skip); then waits until
        every worker has pushed its last gradient; the chief's model then
        holds the final parameters. A worker whose loop ends before the
        job's leaves it here (said; sync goes on without it). Nothing the
        second time."""
        if self._finished or self._job_finished:
            return
        self._join()
        if self._in_step:
            # What the script wrote into the parameters since they came
            # (the step below would put the job's back over it): the
            # torch.optim optimizer's own step() called by mistake would
            # otherwise lose every step of the loop without a word.
            changed = (self._flat.changed(True)
                       if not self._ahead and self._worker.rejoins() == self._rejoins else [])
            if changed:
                raise ConfigError(
                    "finish(): the model's parameters changed since the job's last step (%s), "
                    "and the job's parameters would replace them: a step() of the torch.optim "
                    "optimizer itself (call the DistributedOptimizer's), or an in-place write "
                    "after the loop (make it after finish(), on the final parameters)"
                    % ", ".join(changed[:5]))
            self._end_step(float("nan"), absent_all=True, judge=False)
        if self._job_finished:
            return
        try:
            self._worker.finish()
        except JobFinished:
            self._job_finished = True
            self._buffers.save(self._position[0])
            return
        self._finished = True
        self._flat.after_pull()
        self._buffers.save(self._position[0])

    def close(self):
        """After finish: the chief writes summary.json and shuts the ps
        tasks down. Nothing the second time, or on a worker whose job
        finished without it."""
        if self._closed or self._job_finished or self._worker is None:
            return
        self._closed = True
        self._worker.close()

    def free(self):
        """Its connections and threads go now."""
        if self._worker is not None:
            self._worker.free()

    def log_evaluation(self, accuracy, loss, seconds):
        self._join()
        if self._ahead:
            self.land()
            if self._job_finished:
                return
        self._worker.log_evaluation(accuracy, loss, seconds)

    def land(self):
        """forward_ahead: the model takes the parameters of the step in
        flight now (the newest this worker has); nothing otherwise, or
        inside a step."""
        if not self._ahead or self._worker is None or self._in_step or self._finished \
                or self._job_finished or self._quiet or threading.get_ident() != self._thread:
            return
        try:
            self._worker.land()
        except JobFinished:
            self._job_finished = True
            return
        self._took_parameters()

    def _took_parameters(self, after_step=False):
        """The library wrote the parameters (a pull, a landing, a rejoin;
        `after_step`: at the end of step()): a CUDA model's device copy and
        the position follow, and they are noted as they are."""
        before, rejoins = self._position[0], self._rejoins
        self._flat.after_pull()
        self._flat.mark(contents=not self._ahead)
        self._position = self._worker.position()
        self._rejoins = self._worker.rejoins()
        # A step moves the job one step on, unless the worker rejoined or
        # (sync) found the shards had gone on without it.
        if self._rejoins != rejoins or (after_step and self._position[0] > before + 1):
            self._moved(before + (1 if after_step else 0), after_step)

    def _moved(self, expected, after_step):
        """The job is somewhere else than `expected`: back (a rejoin to a
        ps restored from its checkpoint) or ahead (sync shards that went on
        without this worker while it was frozen or declared dead):
        fast_forward's schedulers follow, one step short `after_step` (the
        loop's own scheduler step follows step())."""
        now = self._position[0]
        if now == expected:
            return
        why = ("the shards went on without this worker (frozen or declared dead)" if now > expected
               else "a ps restored from its checkpoint or its standby")
        if self._schedulers:
            self._rewind_schedulers(now - 1 if after_step else now)
            say("the job went from step %d to step %d (%s): the schedulers given to "
                "opt.fast_forward were set to it" % (expected, now, why))
        else:
            say("the job went from step %d to step %d (%s): a scheduler stepped once a step is "
                "now %d steps off the job's unless given to opt.fast_forward(sched), which sets "
                "it to the job's step" % (expected, now, why, abs(expected - now)))

    @contextlib.contextmanager
    def _no_landing(self):
        """Reading the model's state_dict for its own purposes (its
        buffers) without landing the step just sent."""
        before, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = before

    # -- state -------------------------------------------------------------------

    def state_dict(self):
        """torch.optim's state_dict of the optimizer the ps runs: each
        parameter's state as the ps holds it now (between steps), and the
        param_groups. A one-process optimizer of the same class loads it,
        and so does this one in a new job."""
        self._join()
        if self._in_step:
            raise UsageError("state_dict: a step is under way (after step(), or before the "
                             "forward)")
        self.land()
        with self._library_writes():  # a rejoin while reading gives the job's
            slots, steps = self._worker.optimizer_state()
        groups_of = [self.param_groups[e.group] for e in self._layout]
        self._set_state(collections.defaultdict(
            dict, _groups.state_from_slots(self._kind, groups_of, self._layout, slots, steps)))
        try:
            return super().state_dict()
        finally:
            self._set_state(_StateOnPs())

    def load_state_dict(self, state_dict):
        """torch.optim's state_dict (of this optimizer's class, as
        state_dict() or a one-process optimizer wrote it): its param_groups
        here, and its state where a fresh job's optimizer starts (the
        chief's; call it before the first step). In a job under way the
        job's state, on the ps, is kept, and that is said."""
        if self._worker is not None and not (self._position[0] == 0 and not self._task.is_chief):
            if self._position[0] == 0:
                raise UsageError("load_state_dict: the job has begun; load the state right after "
                                 "making the optimizer, before its first step or global_step")
            say("the job is under way (step %d): its optimizer state, on the ps, is kept; only "
                "the loaded param_groups are used" % self._position[0])
            self._load_keeping_groups(state_dict)
            self._set_state(_StateOnPs())
            return
        self._load_keeping_groups(state_dict)
        self._loaded_state = True

    def _load_keeping_groups(self, state_dict):
        """torch.optim's load_state_dict, which makes new group dicts, but
        into the dicts the groups are now: a scheduler made on the torch
        optimizer before wrapping it edits those (the wrapper's groups are
        the torch optimizer's), and goes on being the one that counts."""
        groups = list(self.param_groups)
        super().load_state_dict(state_dict)
        for kept, loaded in zip(groups, self.param_groups):
            params = kept["params"]
            kept.clear()
            kept.update(loaded)
            kept["params"] = params
        self.param_groups = groups
