"""The parameters the ps trains, laid end to end: the model's parameters
become views of one flat float32 buffer that the library reads and writes
in place (a CUDA model: views of a flat device buffer, copied to and from
pinned host memory once a step). Gradients are read from each parameter's
.grad when they are wanted (a reduce, step()), so a .grad the script
replaced, edited or set to None means what it means to torch.optim."""

import numpy
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
        # What mark() and adopt() note (changed()): nothing before the job
        # takes the parameters.
        self._views = self._versions = self._sum = None
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
        # Where each tensor's gradient lives in the flat buffer (gather_grads
        # compares .grad's address with it, making no view a step).
        self._grads_start = self.device_grads.data_ptr()
        self._grads_end = self._grads_start + 4 * total
        self._grad_ptrs = [self._grads_start + 4 * e.offset for e in layout]
        # The checksum's words, made once (the buffers are never replaced):
        # the buffer's 64-bit words, and its odd last float on its own.
        even = total // 2 * 2
        if self.cuda:
            self._words = self.device_params[:even].view(torch.int64)
            self._tail = self.device_params[even:].view(torch.int32)
        else:
            flat = self.host_params.numpy()
            self._words = flat[:even].view(numpy.uint64)
            self._tail = flat[even:].view(numpy.int32)

    def adopt(self):
        """Before the job takes the parameters: what the script changed since
        the layout was made counts. A parameter given a new tensor (p.data =
        ..., model.to(memory_format=...)) has its values copied into its
        place in the buffer and is viewed there again (ConfigError where it
        cannot be: another size, dtype or device, or another parameter's
        place, a tie made after DistributedOptimizer took them); a CUDA
        model's buffer goes to the host, which the library reads. Which
        tensor each parameter is is noted here, once: it does not change
        after (changed())."""
        start = self.device_params.data_ptr()
        end = start + 4 * self.total
        with torch.no_grad():
            moved = []
            for e in self.layout:
                view = self.device_params[e.offset:e.offset + e.size]
                p = e.param
                if p.data_ptr() == view.data_ptr() and p.is_contiguous():
                    continue
                if p.numel() != e.size or p.dtype != torch.float32 or p.device != self.device:
                    raise ConfigError(
                        "parameter %s became %s %s on %s after DistributedOptimizer took it "
                        "(%d float32 values on %s): make such changes before it takes the model"
                        % (e.name, p.dtype, tuple(p.shape), p.device, e.size, self.device))
                if start <= p.data_ptr() < end:
                    raise ConfigError(
                        "parameter %s now shares another parameter's values (a tie made after "
                        "DistributedOptimizer took them): tie them before" % e.name)
                moved.append((e, view, p.detach().clone()))  # sources first: a swap reads both
            for e, view, values in moved:
                view.copy_(values.reshape(-1))
                e.param.data = view.view(e.param.shape)
            if self.cuda:
                self.host_params.copy_(self.device_params)
        self._views = [e.param.data_ptr() for e in self.layout]

    def grad_view(self, e):
        """A new view of `e`'s gradient in the flat buffer (none is kept:
        autograd accumulates in place into a .grad nothing else holds)."""
        return self.device_grads[e.offset:e.offset + e.size].view_as(e.param)

    def gather_grads(self):
        """Each parameter's .grad into the flat buffer (a .grad the script
        replaced is copied in, and the parameter's .grad becomes the view);
        returns the indices of the tensors whose .grad is None, whose part
        of the host buffer is zeroed. A CUDA model's buffer goes to the host."""
        absent, moved = [], []
        with torch.no_grad():
            for t, e in enumerate(self.layout):
                g = e.param.grad
                if g is None:
                    absent.append(t)
                    continue
                if g.is_sparse:
                    raise ConfigError(
                        "parameter %s has a sparse gradient (nn.Embedding(sparse=True)?): the "
                        "ps tasks take dense ones; make it sparse=False, or keep a large table "
                        "on the ps as pst.Embedding (docs/embeddings.md)" % e.name)
                # A .grad that is not its place in the buffer as the
                # parameter's shape (replaced, or a view of it with other
                # strides: p.grad = p.grad.t()) is copied in.
                if g.data_ptr() != self._grad_ptrs[t] or g.shape != e.param.shape \
                        or not g.is_contiguous():
                    # Sources first: one in the buffer (another tensor's
                    # place, or this one's strided) is read before any write.
                    inside = self._grads_start <= g.data_ptr() < self._grads_end
                    moved.append((e, g.clone() if inside else g))
            for e, g in moved:
                view = self.grad_view(e)
                view.copy_(g)
                e.param.grad = view
            if self.cuda:
                self.host_grads.copy_(self.device_grads, non_blocking=False)
            for t in absent:
                e = self.layout[t]
                self.host_grads[e.offset:e.offset + e.size].zero_()
        return absent

    def no_grads(self, keep_present=False):
        """The host buffer zeroed, as for a worker without a gradient;
        returns every tensor's index (all absent), or with `keep_present`
        those whose .grad is None: a zeroed .grad (zero_grad(set_to_none=
        False)) is a zero gradient, which torch.optim still steps with."""
        self.host_grads.zero_()
        return [t for t, e in enumerate(self.layout)
                if not keep_present or e.param.grad is None]

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

    # The parameters belong to the ps once the job has begun: a change the
    # script makes to them (p.data.clamp_(), load_state_dict,
    # reset_parameters, an nn.Embedding's max_norm, p.data = ...) would be
    # overwritten by the next step's parameters, silently. mark() notes
    # them as the library wrote them; changed() says which differ.

    def _checksum(self):
        # A change of any value shows (a reordering of values does not):
        # the model's buffer's 64-bit words summed, wrapping (numpy's
        # unsigned sum on the CPU: 2-6 ms for 44.8 MB on 2 vCPUs, by how busy
        # they are), and an odd last float on its own.
        if self.cuda:
            total = int(self._words.sum())
        else:
            total = int(self._words.sum(dtype=numpy.uint64))
        return (total, int(self._tail[0]) if len(self._tail) else 0)

    def mark(self, contents=True):
        """What the parameters are now (after adopt()): their versions
        (in-place writes through them), and, with `contents`, the buffer's
        checksum (writes through .data as well, which no version counts)."""
        self.mark_versions()
        self._sum = self._checksum() if contents else None

    def mark_versions(self):
        """The parameters' versions now (a step begins)."""
        self._versions = [e.param._version for e in self.layout]  # pylint: disable=protected-access

    def replaced(self):
        """The names of the parameters given a new tensor since adopt()
        (p.data = ..., model.to(...)): [] before it."""
        if self._views is None:
            return []
        return [e.name for e, ptr in zip(self.layout, self._views)
                if e.param.data_ptr() != ptr]

    def changed(self, contents):
        """The names of the parameters changed since mark(), or [] (also
        before any mark): given a new tensor, or, with `contents`, whose
        values differ from the checksum's (a parameter written and written
        back as it was, an EMA's weights swapped in and out, is unchanged),
        else whose version moved since mark() or mark_versions(). The
        library's own writes (a pull, a rejoin's) move no version;
        `contents` is for where it wrote none since mark()."""
        if self._views is None or self._versions is None:
            return []
        moved = self.replaced()
        if moved:
            return moved
        written = [e.name for e, v in zip(self.layout, self._versions)
                   if e.param._version != v]  # pylint: disable=protected-access
        if not contents:
            return written
        if self._sum is None or self._checksum() == self._sum:
            return []
        return written or ["(through .data)"]
