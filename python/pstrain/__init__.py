"""pstrain for Python: a worker of a pstrain job, over libpstrain.so's C API
(ctypes and numpy buffers; nothing compiled against this Python).

Most scripts want pstrain.torch (PyTorch). This module is the layer under
it, for any framework:

    task = pstrain.Task.from_env()          # TF_CONFIG, PSTRAIN_SECRET_FILE, ...
    params = numpy.zeros(n, numpy.float32)  # the chief: the initial values
    grads = numpy.zeros(n, numpy.float32)
    worker = pstrain.Worker(task, [("w", n)], params, grads, {"lr": 0.1})
    while not worker.done:
        worker.begin_step(batch_size)
        grads[:] = ...                      # this step's gradient
        worker.end_step(loss)               # params now hold the new parameters
    worker.finish(); worker.close()
"""

import ctypes
import json

import numpy

from pstrain import _lib
from pstrain._lib import ConfigError, JobFinished, PstrainError, UsageError

__all__ = ["Task", "Worker", "permutation", "PstrainError", "ConfigError", "UsageError",
           "JobFinished", "GROUP_FIELDS", "JobError", "WorkerError"]


class Task:
    """This process's task in the job: its rank among the chief and the
    workers (the chief is rank 0), and the job's flags."""

    def __init__(self, handle):
        self._handle = ctypes.c_void_p(handle)
        rank, n, chief, dynamic = (ctypes.c_int() for _ in range(4))
        _lib.call("PstrainTaskGetRank", self._handle, ctypes.byref(rank), ctypes.byref(n),
                  ctypes.byref(chief), ctypes.byref(dynamic))
        self.rank, self.num_workers = rank.value, n.value
        self.is_chief, self.dynamic = bool(chief.value), bool(dynamic.value)
        run_dir = ctypes.c_char_p()
        _lib.call("PstrainTaskGetRunDir", self._handle, ctypes.byref(run_dir))
        self.run_dir = run_dir.value.decode()

    @classmethod
    def from_env(cls):
        """From TF_CONFIG, PSTRAIN_SECRET_FILE (or PSTRAIN_INSECURE=1),
        PSTRAIN_RUN_DIR and PSTRAIN_FLAGS, as `pstrain launch` sets them."""
        handle = ctypes.c_void_p()
        _lib.call("PstrainTaskCreateFromEnv", ctypes.byref(handle))
        return cls(handle.value)

    @classmethod
    def create(cls, tf_config, secret_file="", insecure=False, run_dir="", flags=()):
        """From explicit values; `flags` are the job's "--name=value"."""
        handle = ctypes.c_void_p()
        tf = tf_config if isinstance(tf_config, str) else json.dumps(tf_config)
        _lib.call("PstrainTaskCreate", tf.encode(), secret_file.encode(), int(bool(insecure)),
                  run_dir.encode(), json.dumps(list(flags)).encode() if flags else b"",
                  ctypes.byref(handle))
        return cls(handle.value)

    def describe_job(self, job=None):
        """The job a worker with options `job` (a dict, as Worker takes
        them) would start under this task's flags: mode, num_workers,
        backup_workers, staleness, optimizer and its options as the ps
        applies them (lr: the default when none is given). Contacts
        nothing."""
        out = ctypes.c_char_p()
        _lib.call("PstrainTaskDescribeJob", self._handle, json.dumps(job or {}).encode(),
                  ctypes.byref(out))
        return json.loads(out.value.decode())

    def close(self):
        if self._handle:
            _lib.call("PstrainTaskFree", self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass  # a worker still holds it; the process is ending


def _float_buffer(array, what):
    if not isinstance(array, numpy.ndarray) or array.dtype != numpy.float32 \
            or array.ndim != 1 or not array.flags["C_CONTIGUOUS"] or not array.flags["WRITEABLE"]:
        raise UsageError("%s must be a writable, contiguous 1-D numpy float32 array" % what)
    return array.ctypes.data


# A parameter group's settings, in the C API's order (PSTRAIN_GROUP_*).
GROUP_FIELDS = ("lr", "weight_decay", "momentum", "nesterov", "beta1", "beta2", "eps", "lr_decay")


class Worker:
    """The worker runtime over a flat layout of named tensors.

    `tensors`: [(name, number of floats)] in order; `params` and `grads`:
    numpy float32 arrays of their total size, borrowed (kept alive here;
    the library reads and writes them in place). `job`: options over the
    job's flags (optimizer, lr, ..., steps_per_epoch, total_steps,
    tensor_groups; see include/pstrain/c_api.h). `slots`, `tensor_steps`
    (the chief's loaded optimizer state, numpy float32 of num_slots x size
    and int64 of one per tensor): where a fresh job's optimizer starts.
    Joins the job: on return `params` holds the job's parameters (the
    chief's are the initial ones)."""

    def __init__(self, task, tensors, params, grads, job=None, slots=None, tensor_steps=None):
        self.task = task
        self.params, self.grads = params, grads
        if params.size != grads.size:
            raise UsageError("params holds %d floats and grads %d: one float of each per "
                             "parameter" % (params.size, grads.size))
        names = [name.encode() for name, _ in tensors]
        sizes = [int(size) for _, size in tensors]
        self.num_tensors = len(names)
        name_array = (ctypes.c_char_p * len(names))(*names)
        size_array = (ctypes.c_int64 * len(sizes))(*sizes)
        handle = ctypes.c_void_p()
        common = (task._handle,  # pylint: disable=protected-access
                  json.dumps(job or {}).encode(), len(names), name_array, size_array,
                  _float_buffer(params, "params"), _float_buffer(grads, "grads"),
                  int(params.size))
        if slots is None:
            _lib.call("PstrainWorkerCreate", *common, ctypes.byref(handle))
        else:
            slots = numpy.ascontiguousarray(slots, dtype=numpy.float32).reshape(-1)
            steps = numpy.ascontiguousarray(tensor_steps, dtype=numpy.int64).reshape(-1)
            if steps.size != len(names):
                raise UsageError("tensor_steps has %d values for %d tensors"
                                 % (steps.size, len(names)))
            _lib.call("PstrainWorkerCreateWithState", *common, slots.ctypes.data,
                      int(slots.size), steps.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                      ctypes.byref(handle))
        self._handle = handle
        self._step_options = None  # the last set_step_options' settings
        # What position() and rejoins() read, made once (they run each step).
        self._position = (ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int())
        self._position_refs = tuple(ctypes.byref(v) for v in self._position)
        self._rejoins = ctypes.c_int64()
        self._rejoins_ref = ctypes.byref(self._rejoins)

    def position(self):
        """(global_step, total_steps, steps_per_epoch, done)."""
        step, total, per_epoch, done = self._position
        _lib.call("PstrainWorkerGetPosition", self._handle, *self._position_refs)
        return step.value, total.value, per_epoch.value, bool(done.value)

    def rejoins(self):
        """How many times this worker rejoined the job (a ps went away):
        each may have rewritten `params` with the job's."""
        _lib.call("PstrainWorkerGetRejoins", self._handle, self._rejoins_ref)
        return self._rejoins.value

    def versions(self):
        """(lowest, highest): the shards' versions of the parameters held
        now; a fresh job's are 0 until its first update."""
        lowest, highest = ctypes.c_int64(), ctypes.c_int64()
        _lib.call("PstrainWorkerGetVersions", self._handle, ctypes.byref(lowest),
                  ctypes.byref(highest))
        return lowest.value, highest.value

    @property
    def global_step(self):
        return self.position()[0]

    @property
    def done(self):
        return self.position()[3]

    def begin_step(self, num_examples):
        _lib.call("PstrainWorkerBeginStep", self._handle, int(num_examples))

    def set_step_examples(self, num_examples):
        """The step's examples after all (0: no gradient of this worker's)."""
        _lib.call("PstrainWorkerSetStepExamples", self._handle, int(num_examples))

    def tensor_ready(self, index):
        _lib.call("PstrainWorkerTensorReady", self._handle, int(index))

    @property
    def timeline(self):
        """Whether the job writes a timeline (--timeline)."""
        on = ctypes.c_int()
        _lib.call("PstrainWorkerTimeline", self._handle, ctypes.byref(on))
        return bool(on.value)

    def layer_span(self, layer, backward, start_unix_us, duration_us):
        """A span of the step under way for the timeline: `layer`'s forward
        or backward pass (microseconds of the Unix clock)."""
        _lib.call("PstrainWorkerLayerSpan", self._handle, layer.encode(), int(bool(backward)),
                  int(start_unix_us), int(duration_us))

    def set_step_options(self, groups, absent=()):
        """The step's optimizer settings: `groups`, a numpy float64 array of
        shape (groups, len(GROUP_FIELDS)), and the tensors without a
        gradient (indices). They hold until set again: a repeat of the
        last ones set is not sent."""
        groups = numpy.ascontiguousarray(groups, dtype=numpy.float64)
        absent = numpy.ascontiguousarray(absent, dtype=numpy.intc)
        settings = (groups.shape, groups.tobytes(), absent.tobytes())
        if settings == self._step_options:
            return
        _lib.call("PstrainWorkerSetStepOptions", self._handle, int(groups.shape[0]),
                  groups.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), int(absent.size),
                  absent.ctypes.data_as(ctypes.POINTER(ctypes.c_int)))
        self._step_options = settings

    def reduce_gradients(self, absent=()):
        """Sync: `grads` becomes the workers' average of this step's
        gradient. Returns (reduced, absent_everywhere: a bool numpy array
        per tensor); reduced False: no average came (see c_api.h)."""
        absent = numpy.ascontiguousarray(absent, dtype=numpy.intc)
        everywhere = numpy.zeros(self.num_tensors, dtype=numpy.intc)
        reduced = ctypes.c_int()
        _lib.call("PstrainWorkerReduceGradients", self._handle, int(absent.size),
                  absent.ctypes.data_as(ctypes.POINTER(ctypes.c_int)),
                  everywhere.ctypes.data_as(ctypes.POINTER(ctypes.c_int)), ctypes.byref(reduced))
        return bool(reduced.value), everywhere.astype(bool)

    def optimizer_state(self):
        """(slots: float32 array (num_slots, size), tensor_steps: int64 per
        tensor), read from the ps tasks."""
        num_slots = ctypes.c_int()
        _lib.call("PstrainWorkerGetOptimizerState", self._handle, ctypes.byref(num_slots), None, 0,
                  None)
        slots = numpy.empty((num_slots.value, self.params.size), dtype=numpy.float32)
        steps = numpy.empty(self.num_tensors, dtype=numpy.int64)
        _lib.call("PstrainWorkerGetOptimizerState", self._handle, ctypes.byref(num_slots),
                  slots.ctypes.data, int(slots.size),
                  steps.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
        return slots, steps

    def embedding_pull(self, table, ids, dim):
        """Table `table`'s rows of the distinct int64 `ids` (a numpy array),
        as a float32 numpy array (len(ids), dim)."""
        ids = numpy.ascontiguousarray(ids, dtype=numpy.int64).reshape(-1)
        rows = numpy.empty((ids.size, int(dim)), dtype=numpy.float32)
        _lib.call("PstrainWorkerEmbeddingPull", self._handle, int(table), int(ids.size),
                  ids.ctypes.data, rows.ctypes.data)
        return rows

    def embedding_pull_tables(self, requests):
        """Several tables' rows in one request to each ps: `requests` a list
        of (table, distinct int64 ids, dim); a list of float32 numpy arrays
        (len(ids), dim), in that order."""
        n = len(requests)
        ids = [numpy.ascontiguousarray(i, dtype=numpy.int64).reshape(-1) for _, i, _ in requests]
        rows = [numpy.empty((i.size, int(dim)), dtype=numpy.float32)
                for i, (_, _, dim) in zip(ids, requests)]
        tables = (ctypes.c_int * n)(*[int(t) for t, _, _ in requests])
        counts = (ctypes.c_int64 * n)(*[i.size for i in ids])
        id_ptrs = (ctypes.c_void_p * n)(*[i.ctypes.data for i in ids])
        row_ptrs = (ctypes.c_void_p * n)(*[r.ctypes.data for r in rows])
        _lib.call("PstrainWorkerEmbeddingPullTables", self._handle, n, tables, counts, id_ptrs,
                  row_ptrs)
        return rows

    def embedding_prefetch(self, requests):
        """Async: the next forward's rows of `requests`, a list of (table,
        distinct int64 ids), asked for behind this step's push and answered
        with it; a pull of those very ids before the next push takes them
        (c_api.h, PstrainWorkerEmbeddingPrefetch). Sync and SSP: nothing."""
        n = len(requests)
        if n == 0:
            return
        ids = [numpy.ascontiguousarray(i, dtype=numpy.int64).reshape(-1) for _, i in requests]
        tables = (ctypes.c_int * n)(*[int(t) for t, _ in requests])
        counts = (ctypes.c_int64 * n)(*[i.size for i in ids])
        id_ptrs = (ctypes.c_void_p * n)(*[i.ctypes.data for i in ids])
        _lib.call("PstrainWorkerEmbeddingPrefetch", self._handle, n, tables, counts, id_ptrs)

    def embedding_prefetched(self):
        """How many table reads a prefetch answered so far."""
        out = ctypes.c_int64(0)
        _lib.call("PstrainWorkerEmbeddingPrefetched", self._handle, ctypes.byref(out))
        return out.value

    def embedding_grad(self, table, ids, grads, lr=-1.0):
        """The step's row gradients of table `table`: float32 (len(ids),
        dim) of the distinct `ids`; sent at end_step, applied at `lr`
        (< 0: the table's own)."""
        ids = numpy.ascontiguousarray(ids, dtype=numpy.int64).reshape(-1)
        grads = numpy.ascontiguousarray(grads, dtype=numpy.float32)
        _lib.call("PstrainWorkerEmbeddingGrad", self._handle, int(table), int(ids.size),
                  ids.ctypes.data, grads.ctypes.data, float(lr))

    def end_step(self, loss=float("nan")):
        _lib.call("PstrainWorkerEndStep", self._handle, float(loss))

    def land(self):
        """Forward ahead: the step in flight's parameters into `params` now
        (nothing without one)."""
        _lib.call("PstrainWorkerLand", self._handle)

    def log_evaluation(self, accuracy, loss, seconds=-1.0):
        _lib.call("PstrainWorkerLogEvaluation", self._handle, float(accuracy), float(loss),
                  float(seconds))

    def finish(self):
        _lib.call("PstrainWorkerFinish", self._handle)

    def close(self):
        _lib.call("PstrainWorkerClose", self._handle)

    def free(self):
        if self._handle:
            _lib.call("PstrainWorkerFree", self._handle)
            self._handle = ctypes.c_void_p()
            self._step_options = None  # a call after it is refused


def embedding_initial_rows(ids, dim, seed, table_index=0, init="normal", init_std=1.0):
    """The rows the ps tasks start the `table_index`-th table of a job
    seeded `seed` from, for the int64 `ids`: float32 (len(ids), dim)."""
    if init not in ("normal", "uniform"):
        raise ValueError('init is "normal" or "uniform"')
    ids = numpy.ascontiguousarray(ids, dtype=numpy.int64).reshape(-1)
    rows = numpy.empty((ids.size, int(dim)), dtype=numpy.float32)
    _lib.call("PstrainEmbeddingInitialRows", int(dim), int(init == "uniform"), float(init_std),
              int(seed) & (2**64 - 1), int(table_index), int(ids.size), ids.ctypes.data,
              rows.ctypes.data)
    return rows


def permutation(num_examples, seed, epoch):
    """The order epoch `epoch` of a job seeded `seed` visits the data in
    (the C++ worker's DataSharder), as an int64 numpy array."""
    out = numpy.empty(int(num_examples), dtype=numpy.int64)
    _lib.call("PstrainPermutation", int(num_examples), int(seed) & (2**64 - 1), int(epoch),
              out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    return out


# run()'s errors, as its callers catch them (pstrain.WorkerError): the
# runner imports nothing heavier than this package.
from pstrain.runner import JobError, WorkerError  # noqa: E402  pylint: disable=wrong-import-position
