"""run(fn): a Python function as every worker of a pstrain job, started
from a script or a notebook, in the shape of TorchDistributor.run and
HorovodRunner.run.

    import pstrain.torch as pst
    from pstrain.runner import run

    def train(lr):
        pst.init()                  # as a launched script does
        ...                         # DistributedSampler, DistributedOptimizer, steps
        return accuracy             # the chief's return value is run()'s

    accuracy = run(train, 0.02, num_workers=2, num_ps=1, mode="sync", epochs=1)

run() is `pstrain launch` of a cluster of loopback tasks on free ports:
the ps tasks and fn in every worker (the chief, rank 0, and the others),
with the job's secret, run directory, restarts and summary as for a
launched script. The job's output streams to sys.stdout as `pstrain
launch --echo=progress` shows it (quiet=True: none). A failure raises:
WorkerError with the traceback of the rank whose fn raised, JobError when
the job failed otherwise, pstrain.ConfigError when `pstrain launch`
refused the job's flags; Ctrl-C (KeyboardInterrupt) stops the job.

fn and its arguments reach the workers pickled: a function of an
importable module by reference, and, with cloudpickle (Debian:
python3-cloudpickle), closures, lambdas and the functions of __main__ or
a notebook by value. The workers import with the caller's sys.path and
run in its current directory.
"""

import collections
import ctypes
import json
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

from pstrain import _run_worker as _worker
from pstrain._lib import ConfigError, PstrainError

__all__ = ["run", "WorkerError", "JobError", "find_binary"]

# Flags run() gives `pstrain launch` itself.
_OWN_FLAGS = {"cluster_spec": "run() makes the cluster spec from num_workers and num_ps",
              "free_ports": "run() always picks free ports",
              "resume": "resume a job from a shell: pstrain launch --resume=RUN_DIR"}

# After the job is asked to stop (Ctrl-C): how long the launcher may take
# to stop its tasks (its --stop_grace_s, 4 s, and their exits) before it is
# killed, its tasks with it.
_STOP_WAIT_S = 20.0

_OUTPUT_KEPT = 200  # the job's last lines an error carries


class JobError(PstrainError):
    """The job failed without a worker's traceback to show (a ps that died,
    a worker killed by a signal, a job that ended without its summary).
    `exit_code`: `pstrain launch`'s; `output`: its last lines; `run_dir`."""

    def __init__(self, message, exit_code=None, output="", run_dir=None):
        super().__init__(message)
        self.exit_code, self.output, self.run_dir = exit_code, output, run_dir


class WorkerError(JobError):
    """fn raised in a worker. `rank` (0 is the chief), `task` ("worker:1"),
    `traceback`: the worker's traceback text, from fn's frame down."""

    def __init__(self, message, rank, task, traceback, exit_code=None, output="", run_dir=None):
        super().__init__(message, exit_code, output, run_dir)
        self.rank, self.task, self.traceback = rank, task, traceback


for _error in (JobError, WorkerError):
    _error.__module__ = "pstrain"  # as tracebacks name them (pstrain.torch re-exports run)


def find_binary():
    """The `pstrain` binary run() launches: in $PSTRAIN_BIN_DIR when set,
    else beside the installed package (pstrain/_bin/), else the source
    checkout's build/bin/. RuntimeError naming where it looked."""
    given = os.environ.get("PSTRAIN_BIN_DIR")
    if given:
        path = os.path.join(given, "pstrain")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.abspath(path)
        raise RuntimeError("pstrain: PSTRAIN_BIN_DIR=%s holds no pstrain binary" % given)
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.dirname(os.path.realpath(__file__))
    tried = [os.path.join(here, "_bin"),                             # pip install
             os.path.join(source, os.pardir, os.pardir, "build", "bin"),  # python/pstrain
             os.path.join(here, os.pardir, os.pardir, "bin")]        # BUILD/python/pstrain
    for directory in tried:
        path = os.path.normpath(os.path.join(directory, "pstrain"))
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise RuntimeError(
        "pstrain: the pstrain binary is not found (looked in %s); build it (tools/setup.sh), "
        "pip install the package, or set PSTRAIN_BIN_DIR to the directory that holds it"
        % ", ".join(os.path.normpath(d) for d in tried))


def _why_not_by_reference(fn):
    """Why plain pickle cannot send `fn` to another process (None: it can)."""
    name = getattr(fn, "__qualname__", repr(fn))
    if "<lambda>" in name:
        return "%s is a lambda" % name
    if "<locals>" in name:
        return "%s is defined inside a function (a closure)" % name
    if getattr(fn, "__module__", None) == "__main__":
        return "%s is defined in __main__ (a script's or a notebook's top level), which the " \
               "workers do not import" % name
    return None


def _pickled_call(fn, args):
    cloudpickle = _worker.cloudpickle_or_none()
    if cloudpickle is not None:
        try:
            return cloudpickle.dumps((fn, tuple(args)))
        except Exception as e:  # pylint: disable=broad-except
            raise ConfigError("run(): fn or its arguments cannot be pickled to reach the "
                              "workers (%s: %s); pass what the workers can rebuild (a path, "
                              "a number) and make the rest inside fn"
                              % (type(e).__name__, e)) from None
    why = _why_not_by_reference(fn)
    if why is None:
        try:
            return pickle.dumps((fn, tuple(args)))
        except Exception as e:  # pylint: disable=broad-except
            why = "it or its arguments cannot be pickled (%s: %s)" % (type(e).__name__, e)
    raise ConfigError("run(): %s; such a function reaches the workers with cloudpickle: install "
                      "it (Debian: apt-get install python3-cloudpickle), or define the function "
                      "in a module the workers can import" % why)


def _sys_path():
    """The caller's import path, absolute: the workers' start from it."""
    return [os.path.abspath(p) if p else os.getcwd() for p in sys.path]


def _flag_args(job_flags):
    """`pstrain launch` flags from keyword arguments: epochs=3 ->
    --epochs=3, True -> --name=true, a list -> comma-separated."""
    args = []
    for name, value in job_flags.items():
        if name in _OWN_FLAGS:
            raise TypeError("run(): %s= is not a job flag here: %s" % (name, _OWN_FLAGS[name]))
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args.append("--%s=%s" % (name, value))
    return args


def _spec(num_workers, num_ps):
    """Loopback tasks; `pstrain launch --free_ports` gives each a free port."""
    return {"cluster": {"worker": ["localhost:%d" % (2220 + i) for i in range(num_workers)],
                        "ps": ["localhost:%d" % (2240 + i) for i in range(num_ps)]}}


def _default_run_dir(mode):
    """runs/<time>-<mode> in the current directory, as `pstrain launch`'s,
    made here, so that no other call (another thread's, another process's in
    the same second) takes it: the first of it, -2, -3, ... that mkdir
    makes. Returns (it, runs/ if this call made that too, else None)."""
    base = os.path.abspath(os.path.join(
        "runs", "%s-%s" % (time.strftime("%Y%m%d-%H%M%S"), str(mode).split(":")[0])))
    parent = os.path.dirname(base)
    try:
        made_parent = None
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
            made_parent = parent
        for n in range(1, 1000):
            path = base if n == 1 else "%s-%d" % (base, n)
            try:
                os.mkdir(path)
                return path, made_parent
            except FileExistsError:
                continue
    except OSError as e:
        raise ConfigError("run(): cannot make a run directory under %s (%s); give run_dir= "
                          "a directory it can write" % (os.getcwd(), e)) from None
    raise ConfigError("run(): %s-2 to -999 are taken; give run_dir=" % base)


def _first_missing(path):
    """The outermost directory of `path` that does not exist yet (None: all do)."""
    missing = None
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _prepare(run_dir, fn, args, num_workers, num_ps):
    """The run directory's run_fn/: the call and the spec written, an
    earlier run's result and errors removed. Returns (call path, spec path)."""
    call = {"format": _worker.CALL_FORMAT, "sys_path": _sys_path(),
            "name": getattr(fn, "__qualname__", repr(fn)), "call": _pickled_call(fn, args)}
    directory = os.path.join(run_dir, _worker.RUN_FN_DIR)
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name == _worker.RESULT_FILE or name.startswith(_worker.ERROR_PREFIX):
            os.unlink(os.path.join(directory, name))
    call_path = os.path.join(directory, _worker.CALL_FILE)
    with open(call_path, "wb") as f:
        pickle.dump(call, f)
    spec_path = os.path.join(directory, _worker.SPEC_FILE)
    with open(spec_path, "w") as f:
        json.dump(_spec(num_workers, num_ps), f, indent=2)
    return call_path, spec_path


def _die_with_parent():
    """In the launcher's child, before exec: SIGTERM when the caller dies
    (a notebook's kernel killed), so that no job outlives it."""
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


# Looked up before any fork (Linux's; elsewhere the job may outlive its caller).
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


class _Job:
    """`pstrain launch` running, its output read line by line on a thread
    (so that the caller's thread stays free for Ctrl-C)."""

    def __init__(self, argv, quiet):
        self.quiet = quiet
        self.lines = collections.deque(maxlen=_OUTPUT_KEPT)
        self.started_a_task = False
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", bufsize=1, start_new_session=True,
            preexec_fn=_die_with_parent if _PRCTL is not None else None)
        self._queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        with self.process.stdout:
            for line in self.process.stdout:
                self._queue.put(line)
        self._queue.put(None)

    def _show(self, line):
        self.lines.append(line.rstrip("\n"))
        # A task's failure is a task started, also where --echo hides the
        # "started" lines (a task's exit 2 fails the launch with exit 2 too).
        if line.startswith("pstrain: started ") or " failed (exit code " in line:
            self.started_a_task = True
        if not self.quiet:
            sys.stdout.write(line)
            sys.stdout.flush()

    def follow(self, deadline=None):
        """Shows the output until it ends (True) or `deadline` passes."""
        while deadline is None or time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if line is None:
                return True
            self._show(line)
        return False

    def stop(self):
        """SIGTERM to the launcher, which stops every task; SIGKILL to it
        (its tasks die with it) if it is still there after _STOP_WAIT_S or
        at a second Ctrl-C."""
        if not self.quiet:
            sys.stdout.write("pstrain: interrupted: stopping the job\n")
            sys.stdout.flush()
        self._signal(signal.SIGTERM)
        try:
            if self.follow(time.monotonic() + _STOP_WAIT_S):
                self.process.wait()
                return
        except KeyboardInterrupt:
            pass
        self._signal(signal.SIGKILL)
        self.process.wait()

    def _signal(self, sig):
        try:
            os.killpg(self.process.pid, sig)  # its own group: the launcher alone
        except ProcessLookupError:
            pass

    @property
    def output(self):
        return "\n".join(self.lines)


def run(fn, *args, num_workers=2, num_ps=1, mode="sync", quiet=False, **job_flags):
    """Runs fn(*args) in every worker of a pstrain job on this machine and
    returns the chief's (rank 0's) return value.

    fn trains as a launched script does: it calls pstrain.torch.init(), then
    makes its DistributedSampler and DistributedOptimizer and steps
    (pst.rank(), pst.is_chief() and pst.run_dir() say where it is).
    num_workers: the chief and the workers; num_ps: the ps tasks; mode:
    "sync", "async" or "ssp". job_flags: `pstrain launch`'s flags by name
    (epochs=3, max_steps=100, run_dir="runs/a", insecure=True,
    max_restarts=0, staleness=2, echo="all", ...), given to it as
    --name=value; a flag it does not know refuses the job before anything
    starts (pstrain.ConfigError with its message). The run directory
    (run_dir=, else runs/<time>-<mode> here) holds what a launched job's
    does, and run_fn/: the call, the cluster spec, the chief's result.
    quiet: show none of the job's output (an error still carries its end).

    Raises WorkerError (a rank's fn raised: its rank, task and traceback),
    JobError (the job failed otherwise), pstrain.ConfigError (fn cannot be
    sent, or `pstrain launch` refused the flags); KeyboardInterrupt stops
    the job and is raised again."""
    if not callable(fn):
        raise TypeError("run(): fn must be callable, not %s" % type(fn).__name__)
    for name, n in (("num_workers", num_workers), ("num_ps", num_ps)):
        if not isinstance(n, int) or n < 1:
            raise ValueError("run(): %s must be an int >= 1, not %r" % (name, n))
    given = job_flags.pop("run_dir", None)
    flags = _flag_args(job_flags)
    binary = find_binary()
    # What is removed again if the launcher refuses the job: the run
    # directory, and runs/ where this call made it and no other call uses it.
    if given:
        run_dir, made_parent = os.path.abspath(given), None
        made = _first_missing(run_dir)
    else:
        run_dir, made_parent = _default_run_dir(mode)
        made = run_dir
    flags.append("--run_dir=" + run_dir)

    def unmake():
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        if made_parent is not None:
            try:
                os.rmdir(made_parent)
            except OSError:
                pass  # another call's run is in it

    try:
        call_path, spec_path = _prepare(run_dir, fn, args, num_workers, num_ps)
    except BaseException:
        unmake()
        raise
    if "echo" not in job_flags:
        flags.append("--echo=" + ("none" if quiet else "progress"))
    argv = ([binary, "launch", "--cluster_spec=" + spec_path, "--free_ports", "--mode=%s" % mode]
            + flags + ["--", sys.executable or "python3", "-m", "pstrain._run_worker", call_path])
    job = _Job(argv, quiet)
    try:
        job.follow()
    except KeyboardInterrupt:
        job.stop()
        raise
    code = job.process.wait()
    if code == 0:
        return _result(run_dir, job)
    if _refused(code, job):
        unmake()
        hint = ("\n(run()'s keyword arguments other than num_workers, num_ps, mode and quiet are "
                "`pstrain launch` flags; `pstrain launch --help` lists them)"
                if "Unknown command line flag" in job.output else "")
        raise ConfigError("pstrain launch refused the job (exit %d): %s%s"
                          % (code, _last_words(job), hint))
    raise _failure(run_dir, code, job)


def _result(run_dir, job):
    path = os.path.join(run_dir, _worker.RUN_FN_DIR, _worker.RESULT_FILE)
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        raise JobError("the job succeeded but its chief left no return value in %s" % path,
                       0, job.output, run_dir) from None


def _refused(code, job):
    """Whether `pstrain launch` refused the job before starting any task:
    its exit 2 (a flag it does not know, a bad flag value, spec or file)."""
    return not job.started_a_task and code == 2


def _last_words(job):
    """The launcher's own last lines (not its tasks', which are "[task] ...")."""
    own = [line for line in job.lines if line and not line.startswith("[")]
    return "\n".join(own[-3:]) if own else "(no output)"


def _failure(run_dir, code, job):
    """The error for a failed job: the first traceback a rank wrote."""
    directory = os.path.join(run_dir, _worker.RUN_FN_DIR)
    errors = sorted((os.path.getmtime(os.path.join(directory, name)), _worker.error_rank(name))
                    for name in os.listdir(directory) if _worker.error_rank(name) is not None)
    if not errors:
        return JobError("the job failed (pstrain launch exit %d): %s\n(run directory %s)"
                        % (code, _last_words(job), run_dir), code, job.output, run_dir)
    rank = errors[0][1]
    with open(_worker.error_path(directory, rank)) as f:
        traceback = f.read()
    task = "worker:%d" % rank  # run()'s spec: worker i is rank i
    log = os.path.join(run_dir, "logs", "worker-%d.log" % rank)
    others = ", ".join(str(r) for _, r in errors[1:])
    message = "rank %d (%s) failed (pstrain launch exit %d; its log: %s)%s\n%s" % (
        rank, task, code, log, "; ranks %s failed after it" % others if others else "",
        traceback.rstrip("\n"))
    return WorkerError(message, rank, task, traceback, code, job.output, run_dir)
