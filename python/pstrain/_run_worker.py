"""The worker side of pstrain.runner.run(fn): every chief and worker task
of such a job runs

    python3 -m pstrain._run_worker RUN_DIR/run_fn/call.pkl

which loads the function and its arguments that run() pickled, calls
fn(*args) (fn itself calls pstrain.torch.init(), as a launched script
does), and writes beside the call file what run() reads back:

    result.pkl          the chief's (rank 0's) return value, pickled
    error-rank<R>.txt   the traceback of what rank R raised

A rank that raises writes its traceback and re-raises it: the task fails
as a script that raises does (exit 1, restarted by `pstrain launch`; a
pstrain.ConfigError exits 2 and is not). A call that cannot be loaded,
a function that returns without having called pstrain.torch.init(), and
a chief's return value that cannot be pickled exit 2 (they would fail the
same way again).

Nothing here imports torch: the function does.
"""

import json
import os
import pickle
import sys
import traceback

# The names run() and this module share, in RUN_DIR/run_fn/.
RUN_FN_DIR = "run_fn"
CALL_FILE = "call.pkl"
SPEC_FILE = "cluster.json"
RESULT_FILE = "result.pkl"
ERROR_PREFIX = "error-rank"  # error-rank<R>.txt
ERROR_SUFFIX = ".txt"

EXIT_BAD_CONFIG = 2
CALL_FORMAT = 1  # the call file's "format": what this module reads


def error_path(directory, rank):
    return os.path.join(directory, "%s%d%s" % (ERROR_PREFIX, rank, ERROR_SUFFIX))


def error_rank(name):
    """The rank of error file `name` (error_path's), or None for another file."""
    if not (name.startswith(ERROR_PREFIX) and name.endswith(ERROR_SUFFIX)):
        return None
    try:
        return int(name[len(ERROR_PREFIX):-len(ERROR_SUFFIX)])
    except ValueError:
        return None


def task_of(tf_config):
    """(rank, "worker:1") of TF_CONFIG's task: the chief is rank 0, and the
    workers follow it (worker i is rank i, or i + 1 beside a chief), as
    pstrain's C API numbers them."""
    config = json.loads(tf_config)
    kind, index = config["task"]["type"], int(config["task"]["index"])
    has_chief = bool(config.get("cluster", {}).get("chief"))
    rank = 0 if kind == "chief" else index + (1 if has_chief else 0)
    return rank, "%s:%d" % (kind, index)


def cloudpickle_or_none():
    """cloudpickle when installed: closures, lambdas and __main__'s
    functions pickled by value."""
    try:
        import cloudpickle  # pylint: disable=import-outside-toplevel
        return cloudpickle
    except ImportError:
        return None


def _write(path, data):
    """Whole or not at all: a temporary file of this process, renamed."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _say(text):
    sys.stderr.write("pstrain: %s\n" % text)
    sys.stderr.flush()


def _fail(directory, rank, text):
    """A failure that would repeat: said, kept for run(), exit 2."""
    _write(error_path(directory, rank), text.encode())
    _say(text.rstrip("\n"))
    sys.exit(EXIT_BAD_CONFIG)


def _load(call_path):
    """(fn, args): the driver's sys.path first extends ours (its modules,
    its notebook's directory), then the call is unpickled."""
    with open(call_path, "rb") as f:
        envelope = pickle.load(f)
    if not isinstance(envelope, dict) or envelope.get("format") != CALL_FORMAT:
        raise ValueError("%s is not a call file of this pstrain (format %r, expected %d)"
                         % (call_path, envelope.get("format") if isinstance(envelope, dict)
                            else None, CALL_FORMAT))
    for entry in envelope["sys_path"]:
        if entry not in sys.path:
            sys.path.append(entry)
    fn, args = pickle.loads(envelope["call"])
    return fn, args, envelope.get("name", "fn")


def _trained():
    """Whether this process called pstrain.torch.init()."""
    module = sys.modules.get("pstrain.torch")
    if module is None:
        return False
    try:
        module.num_workers()
    except Exception:  # pylint: disable=broad-except
        return False
    return True


def _left_unjoined():
    """Whether fn's pst.init() made no DistributedOptimizer, which would
    join the job (at the latest when the process exits): the others would
    wait for this rank. Then the process is failed here, so that its exit
    (pstrain.torch._process) does not say so a second time."""
    module = sys.modules.get("pstrain.torch._process")
    if module is None or not module.left_unjoined():
        return False
    module.mark_failed()
    return True


# pstrain.torch's JobDone (uncaught from step()) and pstrain's
# JobFinished: the job is over, this rank's part with it (no error; by
# name, as nothing here imports torch).
_JOB_OVER = ("JobDone", "JobFinished")


def main(argv):
    if len(argv) != 2:
        _say("usage: python3 -m pstrain._run_worker RUN_DIR/%s/%s (pstrain.runner.run "
             "starts it)" % (RUN_FN_DIR, CALL_FILE))
        return EXIT_BAD_CONFIG
    call_path = os.path.abspath(argv[1])
    directory = os.path.dirname(call_path)
    rank, _ = task_of(os.environ.get("TF_CONFIG", '{"task": {"type": "worker", "index": 0}}'))
    # An earlier attempt's error (this rank restarted): not this one's.
    try:
        os.unlink(error_path(directory, rank))
    except FileNotFoundError:
        pass
    try:
        fn, args, name = _load(call_path)
    except Exception:  # pylint: disable=broad-except
        _fail(directory, rank, "cannot load the function to run from %s (a function or class "
              "of __main__ or a notebook travels only with cloudpickle: apt-get install "
              "python3-cloudpickle, or define it in a module)\n%s"
              % (call_path, traceback.format_exc()))
    try:
        result = fn(*args)
    except SystemExit as e:
        if e.code not in (None, 0):
            _write(error_path(directory, rank), _below_here(e).encode())
            raise
        result = None  # sys.exit(0): as a return
    except Exception as e:  # pylint: disable=broad-except
        if type(e).__name__ not in _JOB_OVER:
            _write(error_path(directory, rank), _below_here(e).encode())
            raise
        result = None  # the job ended under this rank's loop: as a return
    except BaseException as e:
        _write(error_path(directory, rank), _below_here(e).encode())
        raise
    if not _trained():
        _fail(directory, rank, "%s returned without calling pstrain.torch.init(): the function "
              "run() runs trains through pstrain.torch, as a launched script does" % name)
    if _left_unjoined():
        _fail(directory, rank, "%s returned on rank %d without making a DistributedOptimizer: "
              "the other workers would wait for this one to join the job; every rank trains "
              "(one with nothing to do still makes it and steps through its loop)"
              % (name, rank))
    if rank == 0:
        try:
            data = (cloudpickle_or_none() or pickle).dumps(result)
        except Exception:  # pylint: disable=broad-except
            _fail(directory, rank, "the return value of %s cannot be pickled to reach the "
                  "caller\n%s" % (name, traceback.format_exc()))
        _write(os.path.join(directory, RESULT_FILE), data)
    return 0


def _below_here(e):
    """The traceback of `e` from the function down (without main's frame)."""
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
    return "".join(traceback.format_exception(type(e), e, tb))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
