"""A model's buffers that are not parameters (BatchNorm's running mean and
variance): not sent to the ps. Each worker keeps its own, updated by its
own batches, and the chief evaluates with its own. Each worker saves them
in the run directory (buffers/worker<rank>.pt, every SAVE_EVERY_S and when
it finishes), and a worker that joins a job under way (restarted, or the
job resumed with `pstrain launch --resume`) starts from the ones its
predecessor saved; where there are none, or they are not this model's, it
starts them afresh and says so."""

import os
import time

import torch

from ._process import say

# How often a worker saves its buffers, besides when it finishes.
SAVE_EVERY_S = 30.0


class ModelBuffers:
    """`model`'s buffers and their file (`path`; None: no run directory)."""

    def __init__(self, model, path):
        self._model, self._path = model, path
        self._saved = time.monotonic()
        self._failed = False

    def _own(self):
        """The model's buffers that its state_dict holds (BatchNorm's
        running statistics and batch count), by name."""
        if self._model is None:
            return {}
        names = {name for name, _ in self._model.named_buffers()}
        return {k: v for k, v in self._model.state_dict().items() if k in names}

    def due(self):
        """Whether the buffers are due to be saved (every SAVE_EVERY_S)."""
        return time.monotonic() - self._saved > SAVE_EVERY_S

    def save(self, step):
        """Into the run directory, whole or not at all (a temporary file
        renamed); a failure (a full disk) is said once and training goes on."""
        self._saved = time.monotonic()
        buffers = self._own()
        if self._path is None or not buffers:
            return
        # Its own temporary file: a predecessor presumed dead but still
        # running writes the same path.
        tmp = "%s.%d.tmp" % (self._path, os.getpid())
        try:
            os.makedirs(os.path.dirname(self._path), exist_ok=True)
            torch.save({"step": step,
                        "buffers": {k: v.detach().to("cpu", copy=True) for k, v in buffers.items()}},
                       tmp)
            os.replace(tmp, self._path)
        except Exception as e:  # pylint: disable=broad-except
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if not self._failed:
                self._failed = True
                say("cannot save this worker's buffers to %s (%s); training goes on, a restart "
                    "would start them afresh" % (self._path, e))

    def load(self):
        """The buffers a predecessor of this worker saved, into the model,
        when they are this model's; else they stay as the model made them."""
        path = self._path
        buffers = self._own()
        if path is None or not buffers:
            return

        def afresh(why):
            say("%s: %s; this worker's buffers start afresh" % (path, why))

        if not os.path.exists(path):
            afresh("none saved")
            return
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # pylint: disable=broad-except
            afresh("unreadable (%s: %s)" % (type(e).__name__, e))
            return
        kept = saved.get("buffers") if isinstance(saved, dict) else None
        if not isinstance(kept, dict) or set(kept) != set(buffers) or any(
                not torch.is_tensor(kept[k]) or kept[k].shape != v.shape or kept[k].dtype != v.dtype
                for k, v in buffers.items()):
            afresh("not this model's buffers")
            return
        with torch.no_grad():
            for k, v in buffers.items():
                v.copy_(kept[k])
        say("this worker's %d buffers from %s (saved at step %s)"
            % (len(buffers), path, saved.get("step")))
