"""This process's place in the job (pst.init()), and how it ends: at exit
every worker finishes (its last gradient is in, the chief writes the
summary); a ConfigError exits 2 (bad configuration: not restarted);
JobDone, raised by step() once the job has no step left, ends the script
cleanly (exit 0), as does a JobFinished the script leaves uncaught."""

import atexit
import os
import sys

import pstrain
from pstrain._lib import ConfigError, JobFinished, PstrainError, UsageError


class JobDone(Exception):
    """Raised by step() (and the sampler) once the job has no step left for
    this worker: a restarted or late worker whose loop is its own (its own
    DataLoader and epochs) ends here. Uncaught, the script finishes its
    part of the job and exits 0; catch it to go on after the loop (the
    chief's evaluation)."""


class _Process:
    """What pst.init() made: the task, and the optimizer once there is one."""

    def __init__(self, task):
        self.task = task
        self.optimizer = None
        self.tables = []  # pst.Embedding, in the order they were made
        self.failed = False  # an exception reached the top of the script


_process = None


def state():
    if _process is None:
        raise UsageError("call pstrain.torch.init() first")
    return _process


def current():
    """The process's state, or None before init()."""
    return _process


def say(text):
    """One line on the worker's standard error, at once."""
    sys.stderr.write("pstrain: %s\n" % text)
    sys.stderr.flush()


def init():
    """Reads this process's task from its environment (TF_CONFIG, the secret
    from PSTRAIN_SECRET_FILE, PSTRAIN_RUN_DIR, the job's PSTRAIN_FLAGS).
    A second call does nothing. A bad environment raises ConfigError; a
    script that does not catch it exits 2."""
    global _process
    if _process is not None:
        return
    _install_exit_handlers()
    _process = _Process(pstrain.Task.from_env())


def rank():
    """0 .. num_workers() - 1 over the chief and the workers; the chief is 0."""
    return state().task.rank


def num_workers():
    return state().task.num_workers


def is_chief():
    return state().task.is_chief


def run_dir():
    """The job's run directory ("" for none)."""
    return state().task.run_dir


def log_metrics(test_accuracy, test_loss=float("nan"), seconds=None):
    """The chief's evaluation on the test set, of the parameters the model
    holds: into evals.csv, TensorBoard and Prometheus (at an epoch's end
    also epochs.csv); the last one is summary.json's final_test_accuracy.
    `seconds`: how long the evaluation took (default: the time since the
    last step). On a worker that is not the chief it does nothing."""
    s = state()
    if s.optimizer is None:
        raise UsageError("log_metrics: make the DistributedOptimizer first")
    s.optimizer.log_evaluation(float(test_accuracy), float(test_loss),
                               -1.0 if seconds is None else float(seconds))


def finish():
    """Once this worker's loop is over: waits until every worker has pushed
    its last gradient; the chief's model then holds the job's final
    parameters. A worker whose loop ends before the job's does leaves it
    here (sync goes on without it). Called at exit when the script does
    not."""
    s = state()
    if s.optimizer is not None:
        s.optimizer.finish()


_installed = False


def _install_exit_handlers():
    global _installed
    if _installed:
        return
    _installed = True
    previous = sys.excepthook

    def excepthook(kind, value, traceback):
        if isinstance(value, (JobDone, JobFinished)):
            # The job is done (JobFinished: it ended while this worker was
            # away, and a call of the script's own found out): this
            # worker's loop ends here, cleanly.
            say("%s" % (value,))
            _end(0)
            return
        if _process is not None:
            _process.failed = True
        previous(kind, value, traceback)
        if isinstance(value, ConfigError):
            # Bad configuration fails the same way every time: exit 2, which
            # `pstrain launch` does not restart.
            _flush_and_exit(2)

    sys.excepthook = excepthook
    atexit.register(_at_exit)


def _flush_and_exit(code):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access


def _end(code):
    """Finishes this worker's part of the job and exits with `code` (or 1
    when finishing fails, 2 for a configuration error)."""
    _at_exit()
    _flush_and_exit(code)


def left_unjoined():
    """Whether this process called init() and made no DistributedOptimizer
    in a job whose workers wait for every one to join (not a dynamic one):
    they would wait for it, --register_timeout_s."""
    return _process is not None and _process.optimizer is None and not _process.task.dynamic


def mark_failed():
    """This process fails as it is, its caller having said why: its exit
    finishes nothing and says nothing more."""
    if _process is not None:
        _process.failed = True


def _at_exit():
    # A script that raised fails as it is; one that ended ends the job.
    if _process is None or _process.failed:
        return
    if left_unjoined():
        say("this worker exits without having made a DistributedOptimizer: the job's other "
            "workers would wait for it to join; every worker makes one (one with nothing to "
            "train still does, and calls pst.finish())")
        _flush_and_exit(2)
    opt = _process.optimizer
    if opt is None:
        return
    try:
        opt.finish()
        opt.close()
        # Its connections and heartbeat thread go now, not in the
        # interpreter's teardown.
        opt.free()
    except PstrainError as e:
        say("at exit: %s: %s" % (type(e).__name__, e))
        _flush_and_exit(2 if isinstance(e, ConfigError) else 1)
