"""A PyTorch job under TFJob: `pstrain k8s ... -- python3 /app/train.py`
writes a manifest that validates against the TFJob CRD, whose chief and
worker replicas run the command in the user's image with the C API's
environment, and each replica's TF_CONFIG (as the training operator writes
it) with that environment makes the task pstrain.torch's init() would."""

import json
import os
import subprocess
import unittest

import yaml

import pstrain_testing as t
import pstrain


class K8s(t.TestCase):
    def test_the_replicas_run_the_command_with_the_c_apis_environment(self):
        manifest = os.path.join(self.dir, "job.yaml")
        configs = os.path.join(self.dir, "tf_configs.jsonl")
        subprocess.run([os.path.join(t.BIN_DIR, "pstrain"), "k8s",
                        "--cluster_spec=" + t.spec(self.dir, 2, 2), "--image=localhost/pstrain:1",
                        "--worker_image=localhost/torch-app:1", "--name=torch-job", "--mode=ssp",
                        "--out=" + manifest, "--", "python3", "/app/train.py", "--epochs=2"],
                       check=True)
        subprocess.run([t.PYTHON, os.path.join(t.SOURCE_DIR, "tools", "k8s", "validate_tfjob.py"),
                        manifest, "--tf_configs=" + configs], check=True)
        with open(manifest) as f:
            job = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "TFJob"][0]
        specs = job["spec"]["tfReplicaSpecs"]
        self.assertEqual(specs["PS"]["template"]["spec"]["containers"][0]["command"],
                         ["pstrain", "task", "--"])
        worker = specs["Worker"]["template"]["spec"]["containers"][0]
        self.assertEqual(worker["image"], "localhost/torch-app:1")
        self.assertEqual(worker["command"], ["python3", "/app/train.py", "--epochs=2"])
        env = {e["name"]: e["value"] for e in worker["env"]}
        self.assertEqual(env["PSTRAIN_SECRET_FILE"], "/etc/pstrain/job.secret")
        self.assertEqual(env["PYTHONPATH"], "/opt/pstrain/python")
        self.assertEqual(env["PSTRAIN_LIBRARY"], "/opt/pstrain/lib/libpstrain.so")
        flags = json.loads(env["PSTRAIN_FLAGS"])
        self.assertIn("--mode=ssp", flags)

        ranks = []
        with open(configs) as f:
            for line in f:
                replica = json.loads(line)
                if replica["replica"].startswith("ps-"):
                    continue
                self.assertEqual(replica["command"][:2], ["python3", "/app/train.py"])
                task = pstrain.Task.create(replica["tf_config"], insecure=True,
                                           run_dir=env["PSTRAIN_RUN_DIR"], flags=flags)
                ranks.append((task.rank, task.num_workers, task.is_chief))
                self.assertEqual(task.run_dir, "/data/runs/torch-job")
                task.close()
        self.assertEqual(sorted(ranks), [(0, 2, True), (1, 2, False)])


if __name__ == "__main__":
    unittest.main()
