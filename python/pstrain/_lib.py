"""ctypes bindings of libpstrain.so (include/pstrain/c_api.h), and the
errors its status codes become. Nothing here is compiled: one library
serves every Python 3 and every PyTorch."""

import ctypes
import ctypes.util
import os

API_VERSION = 10

OK = 0
ERROR_FAILED = 1
ERROR_CONFIG = 2
ERROR_USAGE = 3
JOB_FINISHED = 4


class PstrainError(RuntimeError):
    """A call of the C API failed at run time (a ps that cannot be reached,
    a refusal, a file that cannot be written)."""


class ConfigError(PstrainError, ValueError):
    """Bad configuration: the environment, a flag, the job's options, a
    model whose parameters are not the chief's. A script that stops on it
    exits 2 and is not restarted (it would fail the same way again)."""


class UsageError(PstrainError):
    """A call out of order or with bad arguments; nothing happened."""


class JobFinished(PstrainError):
    """The job finished without this worker (it was frozen, or declared
    dead, meanwhile): nothing is left for it to do."""


for _error in (PstrainError, ConfigError, UsageError, JobFinished):
    _error.__module__ = "pstrain"  # as tracebacks name them

_ERRORS = {ERROR_FAILED: PstrainError, ERROR_CONFIG: ConfigError, ERROR_USAGE: UsageError,
           JOB_FINISHED: JobFinished}


def _candidates():
    given = os.environ.get("PSTRAIN_LIBRARY")
    if given:
        yield given
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libpstrain.so")  # installed beside the package
    yield os.path.join(here, "..", "..", "build", "lib", "libpstrain.so")  # a source checkout
    found = ctypes.util.find_library("pstrain")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if not os.path.isabs(path) and os.sep in path:
            path = os.path.abspath(path)
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        return ctypes.CDLL(path), path
    raise ImportError(
        "pstrain: libpstrain.so not found (looked for %s); build it (cmake --build build "
        "--target pstrain_c) or set PSTRAIN_LIBRARY to its path" % ", ".join(tried))


_c, LIBRARY_PATH = _load()

_i64 = ctypes.c_int64
_int = ctypes.c_int
_p = ctypes.c_void_p
_float_p = ctypes.POINTER(ctypes.c_float)

_SIGNATURES = {
    "PstrainVersion": [],
    "PstrainGetLastError": [],
    "PstrainTaskCreateFromEnv": [ctypes.POINTER(_p)],
    "PstrainTaskCreate": [ctypes.c_char_p, ctypes.c_char_p, _int, ctypes.c_char_p,
                          ctypes.c_char_p, ctypes.POINTER(_p)],
    "PstrainTaskFree": [_p],
    "PstrainTaskGetRank": [_p, ctypes.POINTER(_int), ctypes.POINTER(_int), ctypes.POINTER(_int),
                           ctypes.POINTER(_int)],
    "PstrainTaskGetRunDir": [_p, ctypes.POINTER(ctypes.c_char_p)],
    "PstrainTaskDescribeJob": [_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)],
    "PstrainWorkerCreate": [_p, ctypes.c_char_p, _int, ctypes.POINTER(ctypes.c_char_p),
                            ctypes.POINTER(_i64), _p, _p, _i64, ctypes.POINTER(_p)],
    "PstrainWorkerCreateWithState": [_p, ctypes.c_char_p, _int, ctypes.POINTER(ctypes.c_char_p),
                                     ctypes.POINTER(_i64), _p, _p, _i64, _p, _i64,
                                     ctypes.POINTER(_i64), ctypes.POINTER(_p)],
    "PstrainWorkerFree": [_p],
    "PstrainWorkerGetRejoins": [_p, ctypes.POINTER(_i64)],
    "PstrainWorkerGetVersions": [_p, ctypes.POINTER(_i64), ctypes.POINTER(_i64)],
    "PstrainWorkerGetPosition": [_p, ctypes.POINTER(_i64), ctypes.POINTER(_i64),
                                 ctypes.POINTER(_i64), ctypes.POINTER(_int)],
    "PstrainWorkerBeginStep": [_p, _int],
    "PstrainWorkerSetStepExamples": [_p, _int],
    "PstrainWorkerTensorReady": [_p, _int],
    "PstrainWorkerTimeline": [_p, ctypes.POINTER(_int)],
    "PstrainWorkerLayerSpan": [_p, ctypes.c_char_p, _int, _i64, _i64],
    "PstrainWorkerSetStepOptions": [_p, _int, ctypes.POINTER(ctypes.c_double), _int,
                                    ctypes.POINTER(_int)],
    "PstrainWorkerReduceGradients": [_p, _int, ctypes.POINTER(_int), ctypes.POINTER(_int),
                                     ctypes.POINTER(_int)],
    "PstrainWorkerGetOptimizerState": [_p, ctypes.POINTER(_int), _p, _i64,
                                       ctypes.POINTER(_i64)],
    "PstrainWorkerEndStep": [_p, ctypes.c_double],
    "PstrainWorkerLand": [_p],
    "PstrainWorkerLogEvaluation": [_p, ctypes.c_double, ctypes.c_double, ctypes.c_double],
    "PstrainWorkerFinish": [_p],
    "PstrainWorkerClose": [_p],
    "PstrainPermutation": [_i64, ctypes.c_uint64, _int, ctypes.POINTER(_i64)],
    "PstrainWorkerEmbeddingPull": [_p, _int, _i64, _p, _p],
    "PstrainWorkerEmbeddingPullTables": [_p, _int, _p, _p, _p, _p],
    "PstrainWorkerEmbeddingGrad": [_p, _int, _i64, _p, _p, ctypes.c_double],
    "PstrainWorkerEmbeddingPrefetch": [_p, _int, _p, _p, _p],
    "PstrainWorkerEmbeddingPrefetched": [_p, _p],
    "PstrainEmbeddingInitialRows": [_int, _int, ctypes.c_double, ctypes.c_uint64, _int, _i64, _p,
                                    _p],
}

# The version first: a library of another version may lack functions.
_c.PstrainVersion.argtypes = []
_c.PstrainVersion.restype = _int
if _c.PstrainVersion() != API_VERSION:
    raise ImportError("pstrain: %s has C API version %d; this package needs %d"
                      % (LIBRARY_PATH, _c.PstrainVersion(), API_VERSION))

for _name, _args in _SIGNATURES.items():
    _f = getattr(_c, _name)
    _f.argtypes = _args
    _f.restype = ctypes.c_char_p if _name == "PstrainGetLastError" else _int


def check(code):
    """Raises the error a status code stands for, with the library's message."""
    if code == OK:
        return
    message = _c.PstrainGetLastError().decode("utf-8", "replace")
    raise _ERRORS.get(code, PstrainError)(message)


def call(name, *args):
    check(getattr(_c, name)(*args))


def raw(name):
    """The C function itself (for tests of the C API's own checks)."""
    return getattr(_c, name)
