"""The parameters the ps trains, laid end to end: the model's parameters
become views of one flat float32 buffer that the library reads and writes
in place (a CUDA model: views of a flat device buffer, copied to and from
pinned host memory once a step). Gradients are read from each parameter's
.grad when they are wanted (a reduce, step()), so a .grad the script
replaced, edited or set to None means what it means to torch.optim."""

import torch

from pstrain._lib import ConfigError


class Entry:
    """One tensor of the layout: its parameter, name, group, place."""

    __slots__ = ("param", "name", "group", "offset", "size", "initial_accumulator")

    def __init__(self, param, name, group, offset, initial_accumulator=0.0):
        self.param, self.name, self.group = param, name, group
        self.offset, self.size = offset, param.numel()
        self.initial_accumulator = initial_accumulator


def check_device(params):
    """The one device of the parameters: the CPU or a CUDA GPU, else
    ConfigError saying what to do."""
    devices = {p.device for p in params}
    if len(devices) != 1:
        raise ConfigError("the parameters are on several devices (%s); pstrain trains a model on "
                          "one: move it with model.to(device)"
                          % ", ".join(sorted(map(str, devices))))
    device = devices.pop()
    if device.type not in ("cpu", "cuda"):
        raise ConfigError("the model is on %s; pstrain.torch trains models on the CPU or a CUDA "
                          "GPU: model.to('cpu') or model.to('cuda')" % device)
    return device


class FlatParameters:
    """The layout's parameters and gradients as flat buffers."""

    def __init__(self, layout, device):
        self.layout, self.device = layout, device
        self.cuda = device.type == "cuda"
        total = sum(e.size for e in layout)
        self.total = total
        for e in layout:
            if e.param.dtype != torch.float32:
                raise ConfigError("parameter %s is %s; pstrain trains float32 parameters (for "
                                  "mixed precision, keep them float32 and use torch.autocast)"
                                  % (e.name, e.param.dtype))
        # The library's buffers: host memory (pinned for a CUDA model).
        self.host_params = torch.empty(total, dtype=torch.float32, pin_memory=self.cuda)
        self.host_grads = torch.zeros(total, dtype=torch.float32, pin_memory=self.cuda)
        with torch.no_grad():
            for e in layout:
                self.host_params[e.offset:e.offset + e.size].copy_(e.param.reshape(-1))
        self.device_params = (torch.empty(total, device=device) if self.cuda
                              else self.host_params)
        self.device_grads = torch.zeros(total, device=device) if self.cuda else self.host_grads
        with torch.no_grad():
            if self.cuda:
                self.device_params.copy_(self.host_params)
            for e in layout:
                e.param.data = self.device_params[e.offset:e.offset + e.size].view_as(e.param)

    def grad_view(self, e):
        """A new view of `e`'s gradient in the flat buffer (none is kept:
        autograd accumulates in place into a .grad nothing else holds)."""
        return self.device_grads[e.offset:e.offset + e.size].view_as(e.param)

    def gather_grads(self):
        """Each parameter's .grad into the flat buffer (a .grad the script
        replaced is copied in, and the parameter's .grad becomes the view);
        returns the indices of the tensors whose .grad is None, whose part
        of the host buffer is zeroed. A CUDA model's buffer goes to the host."""
        absent = []
        with torch.no_grad():
            for t, e in enumerate(self.layout):
                g = e.param.grad
                if g is None:
                    absent.append(t)
                    continue
                view = self.grad_view(e)
                if g.data_ptr() != view.data_ptr() or g.shape != view.shape:
                    view.copy_(g)
                    e.param.grad = view
            if self.cuda:
                self.host_grads.copy_(self.device_grads, non_blocking=False)
            for t in absent:
                e = self.layout[t]
                self.host_grads[e.offset:e.offset + e.size].zero_()
        return absent

    def scatter_grads(self, absent_everywhere):
        """The host buffer (the workers' average) back into every .grad but
        those no worker had; a tensor this worker had none for gets one."""
        with torch.no_grad():
            if self.cuda:
                self.device_grads.copy_(self.host_grads, non_blocking=False)
            for t, e in enumerate(self.layout):
                if not absent_everywhere[t] and e.param.grad is None:
                    e.param.grad = self.grad_view(e)

    def after_pull(self):
        """The library wrote host_params: a CUDA model's device copy follows."""
        if self.cuda:
            with torch.no_grad():
                self.device_params.copy_(self.host_params, non_blocking=False)
