"""A PyTorch job of dynamic workers (TFJob's enableDynamicWorker), every
replica started as Kubeflow's training operator starts it: the manifest
`pstrain k8s --dynamic_workers ... -- python3 train.py` writes, each
replica's TF_CONFIG in the operator's sparse form (a ps sees only itself, a
worker every ps and only itself; tools/k8s/validate_tfjob.py writes them as
the operator's code does), the replica's command and environment from the
manifest. Here every replica is a process on this host: the services'
addresses become free ports of 127.0.0.1 and the pods' paths (the secret,
the run directory, the data, the package) directories of the test. The job
starts with workers 0 (the chief) and 1; worker 2 joins mid-run and leaves
again (scaled down: SIGTERM); the job ends after its updates, and ranks 0,
1 and 2 took part."""

import csv
import ctypes
import json
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

import pstrain_testing as t

MAX_STEPS = 3000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child: SIGKILL when the test's process dies (a test killed at
    its timeout leaves no replica behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Pod:
    """One replica's process, its output collected as it comes."""

    def __init__(self, name, argv, env):
        self.name = name
        self.lines = []
        self.process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        preexec_fn=_die_with_parent)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait(self, timeout_s):
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(10)
        self.process.stdout.close()
        return code

    @property
    def output(self):
        return "\n".join(self.lines)


def steps_logged(run_dir, rank):
    try:
        with open(os.path.join(run_dir, "steps_worker%d.csv" % rank)) as f:
            return sum(1 for _ in csv.DictReader(f))
    except (FileNotFoundError, csv.Error):
        return 0


class DynamicWorkers(t.TestCase):
    def run_dynamic(self, script, script_args, max_steps):
        """The job of `script` (run as /app/SCRIPT's basename in the pods)
        with `script_args`, `max_steps` updates: workers 0 and 1, then 2
        joins and leaves. Its summary and pods, every pod ended with 0."""
        manifest = os.path.join(self.dir, "job.yaml")
        configs = os.path.join(self.dir, "tf_configs.jsonl")
        generated = subprocess.run(
            [os.path.join(t.BIN_DIR, "pstrain"), "k8s",
             "--cluster_spec=" + os.path.join(t.SOURCE_DIR, "cluster_specs", "local_2ps_4w.json"),
             "--dynamic_workers", "--image=localhost/pstrain:1", "--worker_image=localhost/app:1",
             "--name=dyn", "--mode=async", "--max_steps=%d" % max_steps, "--peer_timeout_s=4",
             "--log_every_steps=50", "--out=" + manifest,
             "--", "python3", "/app/" + os.path.basename(script)] + list(script_args),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        self.assertEqual(generated.returncode, 0, generated.stdout)
        subprocess.run([t.PYTHON, os.path.join(t.SOURCE_DIR, "tools", "k8s", "validate_tfjob.py"),
                        manifest, "--tf_configs=" + configs], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        with open(manifest) as f:
            worker_env = self.worker_env(f.read())
        replicas = {}
        with open(configs) as f:
            for line in f:
                r = json.loads(line)
                replicas[r["replica"]] = r
        self.assertEqual(sorted(replicas), ["ps-0", "ps-1", "worker-0", "worker-1", "worker-2",
                                            "worker-3"])
        # No Chief replica: worker 0 is the chief.
        self.assertEqual(json.loads(replicas["worker-1"]["tf_config"])["cluster"]["worker"],
                         {"1": "dyn-worker-1.default.svc:2222"})

        # The pods' world on this host.
        secret = os.path.join(self.dir, "job.secret")
        subprocess.run([os.path.join(t.BIN_DIR, "pstrain"), "keygen", "--out=" + secret],
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        run_dir = os.path.join(self.dir, "runs", "dyn")
        local = {"/etc/pstrain/job.secret": secret, "/data/runs/dyn": run_dir,
                 "/data/mnist": t.DATA_DIR,
                 "/opt/pstrain/lib": os.path.abspath(os.path.join(t.BIN_DIR, "..", "lib")),
                 "/opt/pstrain/python": t.PACKAGE_DIR,
                 "/app/" + os.path.basename(script): script,
                 # One host: no fixed metrics port for every pod.
                 "--metrics_port=9100": "--metrics_port=0"}
        for r in replicas.values():
            local[r["service"] + ":2222"] = "127.0.0.1:%d" % free_port()

        def localise(text):
            for pod_path, here in local.items():
                text = text.replace(pod_path, here)
            return text

        def start(name):
            r = replicas[name]
            env = dict(os.environ, TF_CONFIG=localise(r["tf_config"]))
            if name.startswith("ps-"):
                # `pstrain task` as the pstrain image runs it.
                argv = [os.path.join(t.BIN_DIR, "pstrain")] + r["command"][1:] + r["args"]
            else:
                env.update({k: localise(v) for k, v in worker_env.items()})
                argv = [t.PYTHON] + r["command"][1:] + r["args"]
            return Pod(name, [localise(a) for a in argv], env)

        pods = {name: start(name) for name in ("ps-0", "ps-1", "worker-0", "worker-1")}
        try:
            # Scaled up: worker 2 joins the running job.
            self.wait_for(lambda: steps_logged(run_dir, 0) >= 10, pods, "worker-0's step 10")
            pods["worker-2"] = start("worker-2")
            self.wait_for(lambda: steps_logged(run_dir, 2) >= 20, pods, "worker-2's step 20")
            # Scaled down: the operator deletes the highest index's pod.
            pods["worker-2"].process.send_signal(signal.SIGTERM)
            pods["worker-2"].wait(60)
            deadline = time.monotonic() + 600
            for name in ("worker-0", "worker-1", "ps-0", "ps-1"):
                code = pods[name].wait(max(1.0, deadline - time.monotonic()))
                self.assertEqual(code, 0, "%s:\n%s" % (name, pods[name].output))
        finally:
            for pod in pods.values():
                if pod.process.poll() is None:
                    pod.process.kill()
                    pod.wait(10)
        s = t.summary(run_dir)
        self.assertTrue(s["dynamic_workers"])
        self.assertEqual(s["worker_ranks"], [0, 1, 2])
        # Exactly the job's updates, whoever made them.
        self.assertIn("ps:0 done: version %d, %d updates" % (max_steps, max_steps),
                      pods["ps-0"].output)
        self.assertIn("rank 2 joined", pods["ps-0"].output)
        return s, pods

    def test_python_workers_join_and_leave_a_running_async_job(self):
        s, _ = self.run_dynamic(t.SCRIPT, ["--data_dir=/data/mnist", "--evaluate", "--epochs=4"],
                                MAX_STEPS)
        print("dynamic Python workers: ranks %s, %d updates, final test accuracy %.4f"
              % (s["worker_ranks"], s["updates_applied"], s["final_test_accuracy"]))
        self.assertGreater(s["final_test_accuracy"], 0.8)

    def test_a_job_with_embedding_tables(self):
        # Rows by id with workers that come and go (async: each push's rows
        # applied on arrival, the joined worker's too).
        script = os.path.join(t.SOURCE_DIR, "tests", "python", "scripts", "embedding_net.py")
        steps = 1500
        s, _ = self.run_dynamic(script, ["--steps=%d" % steps, "--step_sleep_ms=10",
                                         "--out=/data/runs/dyn/final.pt"], steps)
        tables = s["embedding_tables"]
        print("dynamic Python workers with tables: ranks %s, %d updates, table updates %s"
              % (s["worker_ranks"], s["updates_applied"], [x["updates"] for x in tables]),
              flush=True)
        self.assertEqual([x["name"] for x in tables], ["first", "second"])
        # Every push had a gradient of the first table: one of its updates
        # with each dense update (a push the job went past is dropped with
        # its dense gradient).
        self.assertEqual(tables[0]["updates"], s["updates_applied"])

    def worker_env(self, manifest_text):
        """The Worker replica's container environment in the manifest."""
        import yaml  # pylint: disable=import-outside-toplevel
        job = [d for d in yaml.safe_load_all(manifest_text) if d and d.get("kind") == "TFJob"][0]
        container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        return {e["name"]: e["value"] for e in container["env"]}

    def wait_for(self, condition, pods, what, timeout_s=300):
        deadline = time.monotonic() + timeout_s
        while not condition():
            dead = [n for n, p in pods.items() if p.process.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.fail("waiting for %s: %s\n%s" % (
                    what, "exited: " + ", ".join(dead) if dead else "timed out",
                    "\n".join("== %s\n%s" % (n, p.output[-3000:]) for n, p in pods.items())))
            time.sleep(0.2)


if __name__ == "__main__":
    unittest.main()
