"""The C API from Python (ctypes), as pstrain's package uses it: misuse
(null handles, wrong sizes, calls out of order, bad configuration) raises
an error naming it and never takes the process down."""

import ctypes
import json
import unittest

import numpy

import pstrain_testing as t
import pstrain
from pstrain import _lib

CHIEF = {"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]},
         "task": {"type": "worker", "index": 0}}


class CApi(t.TestCase):
    def test_null_handles_are_usage_errors(self):
        for name, args in [("PstrainWorkerBeginStep", (None, 1)),
                           ("PstrainWorkerTensorReady", (None, 0)),
                           ("PstrainWorkerEndStep", (None, 0.0)),
                           ("PstrainWorkerFinish", (None,)),
                           ("PstrainTaskGetRank", (None, None, None, None, None))]:
            with self.assertRaises(pstrain.UsageError) as e:
                _lib.call(name, *args)
            self.assertRegex(str(e.exception), r"(worker|task) is NULL")
        _lib.call("PstrainWorkerFree", None)  # freeing nothing is allowed

    def test_bad_configuration_is_a_config_error(self):
        with self.assertRaisesRegex(pstrain.ConfigError, "TF_CONFIG"):
            pstrain.Task.create("{broken", insecure=True)
        with self.assertRaisesRegex(pstrain.ConfigError, "--lr=fast"):
            pstrain.Task.create(CHIEF, insecure=True, flags=["--lr=fast"])
        with self.assertRaisesRegex(pstrain.ConfigError, "PSTRAIN_SECRET_FILE"):
            pstrain.Task.create(CHIEF)
        task = pstrain.Task.create(CHIEF, insecure=True, run_dir="/tmp/x", flags=["--mode=ssp"])
        self.assertEqual((task.rank, task.num_workers, task.is_chief), (0, 1, True))
        self.assertEqual(task.run_dir, "/tmp/x")
        task.close()

    def test_sgd_defaults_follow_the_mode(self):
        # What DistributedOptimizer(model, "sgd") starts from when the
        # script gives no lr or momentum: the C++ workers' defaults.
        four = {"cluster": {"worker": ["localhost:%d" % p for p in range(1, 5)], "ps": ["localhost:9"]},
                "task": {"type": "worker", "index": 1}}
        for flags, job, lr, momentum in [
                (["--mode=sync"], {}, 0.04, 0.5),
                (["--mode=async"], {}, 0.08, 0.0),
                (["--mode=ssp"], {}, 0.08, 0.0),
                (["--mode=async"], {"momentum": 0.9}, 0.008, 0.9),
                (["--mode=async", "--momentum=0.5"], {}, 0.04, 0.5),
                (["--mode=async", "--lr=0.1"], {}, 0.1, 0.0)]:
            task = pstrain.Task.create(four, insecure=True, flags=flags)
            got = task.describe_job(dict(job, optimizer="sgd"))
            self.assertAlmostEqual(got["lr"], lr, msg=flags, delta=1e-15)
            self.assertEqual(got["momentum"], momentum, flags)
            task.close()
        task = pstrain.Task.create(CHIEF, insecure=True, flags=["--mode=async"])  # one worker
        self.assertEqual((task.describe_job({})["lr"], task.describe_job({})["momentum"]), (0.01, 0.5))
        task.close()

    def test_wrong_buffers_are_usage_errors_before_anything_connects(self):
        task = pstrain.Task.create(CHIEF, insecure=True)
        params = numpy.zeros(8, numpy.float32)
        with self.assertRaisesRegex(pstrain.UsageError, "params holds 8 floats and grads 7"):
            pstrain.Worker(task, [("a", 3), ("b", 5)], params, numpy.zeros(7, numpy.float32))
        with self.assertRaisesRegex(pstrain.UsageError, "hold 8 floats.*add up to 9"):
            pstrain.Worker(task, [("a", 4), ("b", 5)], params, params.copy())
        with self.assertRaisesRegex(pstrain.UsageError, "float32"):
            pstrain.Worker(task, [("a", 8)], params, numpy.zeros(8, numpy.float64))
        with self.assertRaisesRegex(pstrain.UsageError, "has size 0"):
            pstrain.Worker(task, [("a", 8), ("b", 0)], params, params.copy())
        with self.assertRaisesRegex(pstrain.ConfigError, "job options"):
            # Create reads the job's options before it connects.
            w = _lib.raw("PstrainWorkerCreate")
            names = (ctypes.c_char_p * 1)(b"a")
            sizes = (ctypes.c_int64 * 1)(8)
            handle = ctypes.c_void_p()
            _lib.check(w(task._handle, b"[1, 2]", 1, names, sizes, params.ctypes.data,
                         params.ctypes.data, 8, ctypes.byref(handle)))
        task.close()

    def test_the_permutation_is_the_jobs_order(self):
        p = pstrain.permutation(1000, 3, 2)
        self.assertEqual(sorted(p.tolist()), list(range(1000)))
        self.assertTrue(numpy.array_equal(p, pstrain.permutation(1000, 3, 2)))
        self.assertFalse(numpy.array_equal(p, pstrain.permutation(1000, 3, 3)))
        with self.assertRaises(pstrain.UsageError):
            pstrain.permutation(0, 3, 2)
        json.dumps(p.tolist())


if __name__ == "__main__":
    unittest.main()
