"""--timeline: the step's layers for the job's timeline, as the C++ model
draws its own: each leaf module's forward, and the backward of each with
parameters of its own (from its output's gradient to the last of its
parameters' gradients; with several backward passes in a step, the
last's). Only with --timeline: the hooks cost. Not on a GPU, where hooks
would time kernel launches rather than the work. A TorchScript module
takes no hooks: it and what it holds are left out."""

import time

import torch


def unix_us():
    """The Unix clock in microseconds, as the timeline's spans are."""
    return time.time_ns() // 1000


def training(module):
    """Whether `module` runs a training pass (not an evaluation)."""
    return module.training and torch.is_grad_enabled()


class LayerSpans:
    """The spans of the step under way, from hooks on `model`'s leaf
    modules; `index`: id(parameter) -> its tensor index in the layout."""

    def __init__(self, model, index, hooks):
        self._spans = []            # (name, backward, start us, duration us)
        self._forward_start = {}
        self._backward_start = {}   # module name -> when its output's gradient came
        self._accumulated = {}      # tensor index -> when its gradient was final
        self._module_params = []    # (name, [tensor index]) of modules with parameters
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
            hooks.append(module.register_forward_pre_hook(self._span_start(name)))
            hooks.append(module.register_forward_hook(self._span_end(name, bool(own))))

    def gradient_final(self, tensor):
        """Tensor `tensor`'s gradient is in (its accumulation hook ran)."""
        self._accumulated[tensor] = unix_us()

    def _span_start(self, name):
        def hook(module, _inputs):
            if training(module):
                self._forward_start[name] = unix_us()
        return hook

    def _span_end(self, name, has_params):
        def hook(module, _inputs, output):
            start = self._forward_start.pop(name, None)
            if start is None or not training(module):
                return
            self._spans.append((name, False, start, unix_us() - start))
            if has_params and torch.is_tensor(output) and output.requires_grad:
                def backward_started(_grad):
                    self._backward_start[name] = unix_us()
                output.register_hook(backward_started)
        return hook

    def send(self, worker):
        """The step's spans to the timeline, before the step ends."""
        for name, own in self._module_params:
            start = self._backward_start.get(name)
            end = max((self._accumulated[i] for i in own if i in self._accumulated), default=None)
            if start is not None and end is not None and end >= start:
                self._spans.append((name, True, start, end - start))
        try:
            for name, backward, start, duration in self._spans:
                worker.layer_span(name, backward, start, duration)
        finally:
            self._spans.clear()
            self._backward_start.clear()
            self._accumulated.clear()
