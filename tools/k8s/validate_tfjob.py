#!/usr/bin/env python3
"""Validates a TFJob manifest as a cluster would, and derives each replica's
TF_CONFIG as Kubeflow's training operator does.

  tools/k8s/validate_tfjob.py MANIFEST.yaml [--crd deploy/k8s/crd/kubeflow.org_tfjobs.yaml]
                              [--tf_configs OUT.jsonl [--cluster_domain D] [--operator_before_2023]]

For every TFJob document:
  - the CRD's openAPIV3Schema (kubeflow.org/v1), with jsonschema;
  - pruning: a field the schema does not know (where it neither allows
    additional properties nor preserves unknown fields) is an error here,
    where the API server would silently drop it;
  - the operator's own rules: replica types PS, Worker, Chief, Master or
    Evaluator; at most one Chief/Master; replicas >= 1; a container named
    "tensorflow" with an image.
Other documents (Secret, PersistentVolumeClaim) get their required fields
checked. With --tf_configs, one JSON line per replica:
  {"replica": "ps-0", "service": "<job>-ps-0.<namespace>.svc", "tf_config": "...",
   "command": [...], "args": [...], "restartPolicy": "OnFailure"}
where tf_config is the TF_CONFIG environment variable's value byte for
byte as the operator's code (pkg/controller.v1/tensorflow, genClusterSpec
and genTFConfigJSONStr, through Go's json.Marshal) writes it, or null where
it sets none (a job of one replica):
  - types lower-cased, each replica at "<job>-<type>-<i>.<namespace>.svc:<port>"
    (plus ".<domain>" with --cluster_domain, the operator's
    CUSTOM_CLUSTER_DOMAIN), the port the tensorflow container's port named
    tfjob-port (default 2222);
  - {"cluster":{...every type...},"task":{"type":T,"index":I},"environment":"cloud"};
  - with spec.enableDynamicWorker, convertClusterSpecToSparseClusterSpec's
    form and no "environment": a ps {"cluster":{"worker":{},"ps":[itself]},...},
    a worker {"cluster":{"worker":{"I":itself},"ps":[every ps]},...} (null
    for ps when the job has none), every other type (Chief, Master,
    Evaluator) {"cluster":{"worker":{},"ps":[]},...}; with
    --operator_before_2023 under the key "sparseCluster" instead, as
    operators released before May 2023 wrote it.
Exit 0 when valid; 1 naming every problem otherwise; 2 for bad usage.
Needs python3-yaml and python3-jsonschema (Debian packages).
"""

import argparse
import json
import os
import sys

import jsonschema
import yaml

REPLICA_TYPES = ("PS", "Worker", "Chief", "Master", "Evaluator")
# The operator's RestartPolicy values (the CRD's schema leaves it a string).
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
DEFAULT_PORT = 2222


def load_schema(crd_path):
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    for version in crd["spec"]["versions"]:
        if version["name"] == "v1":
            return version["schema"]["openAPIV3Schema"]
    raise SystemExit("%s: no v1 version" % crd_path)


def pruned_fields(doc, schema, path, out):
    """Every field of `doc` the structural schema would prune."""
    if isinstance(doc, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        for key, value in doc.items():
            where = "%s.%s" % (path, key)
            if props is not None and key in props:
                pruned_fields(value, props[key], where, out)
            elif isinstance(additional, dict):
                pruned_fields(value, additional, where, out)
            elif props is not None and not additional:
                out.append(where)
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            pruned_fields(item, schema["items"], "%s[%d]" % (path, i), out)


def tf_container(replica):
    for c in replica.get("template", {}).get("spec", {}).get("containers", []):
        if c.get("name") == "tensorflow":
            return c
    return None


def tfjob_port(replica):
    c = tf_container(replica) or {}
    for p in c.get("ports", []):
        if p.get("name") == "tfjob-port":
            return p.get("containerPort", DEFAULT_PORT)
    return DEFAULT_PORT


def operator_rules(job, problems):
    name = job.get("metadata", {}).get("name", "?")
    specs = job.get("spec", {}).get("tfReplicaSpecs") or {}
    if not specs:
        problems.append("%s: no tfReplicaSpecs" % name)
    chiefs = 0
    for rtype, replica in specs.items():
        where = "%s: tfReplicaSpecs.%s" % (name, rtype)
        if rtype not in REPLICA_TYPES:
            problems.append("%s: unknown replica type (%s)" % (where, ", ".join(REPLICA_TYPES)))
        if rtype in ("Chief", "Master"):
            chiefs += replica.get("replicas", 1)
        if replica.get("restartPolicy", "Never") not in RESTART_POLICIES:
            problems.append("%s: restartPolicy %r (%s)" % (where, replica.get("restartPolicy"),
                                                          ", ".join(RESTART_POLICIES)))
        if replica.get("replicas", 1) < 1:
            problems.append("%s: replicas must be >= 1" % where)
        c = tf_container(replica)
        if c is None:
            problems.append("%s: no container named \"tensorflow\" (the operator needs it)" % where)
        elif not c.get("image"):
            problems.append("%s: the tensorflow container has no image" % where)
    if chiefs > 1:
        problems.append("%s: at most one Chief/Master replica" % name)


def go_json(value):
    """json.Marshal's compact form (the names here are ASCII: no escaping differs)."""
    return json.dumps(value, separators=(",", ":"))


def operator_cluster(job, domain):
    """genClusterSpec: each replica type, lower-cased, to its replicas' addresses."""
    meta = job["metadata"]
    name, namespace = meta["name"], meta.get("namespace", "default")
    cluster = {}
    for rtype, replica in job["spec"]["tfReplicaSpecs"].items():
        t = rtype.lower()
        port = tfjob_port(replica)
        suffix = "." + domain if domain else ""
        cluster[t] = ["%s-%s-%d.%s.svc%s:%d" % (name, t, i, namespace, suffix, port)
                      for i in range(replica.get("replicas", 1))]
    return cluster


def is_distributed(job):
    """isDistributed: the operator sets no TF_CONFIG for a job of one replica."""
    return sum(r.get("replicas", 1) for r in job["spec"]["tfReplicaSpecs"].values()) != 1


def operator_tf_config(job, cluster, t, i, before_2023):
    """genTFConfigJSONStr for replica i of type t, as the operator's code writes it."""
    task = {"type": t, "index": i}
    if not job["spec"].get("enableDynamicWorker", False):
        # TFConfig{Cluster, Task, Environment}; Go writes a map's keys sorted.
        ordered = {k: cluster[k] for k in sorted(cluster)}
        return go_json({"cluster": ordered, "task": task, "environment": "cloud"})
    # convertClusterSpecToSparseClusterSpec: SparseClusterSpec{Worker, PS},
    # filled for the ps and worker types only.
    sparse = {"worker": {}, "ps": []}
    if t == "ps":
        sparse["ps"] = [cluster["ps"][i]]
    elif t == "worker":
        sparse["ps"] = cluster.get("ps")  # a nil slice: null
        sparse["worker"] = {str(i): cluster["worker"][i]}
    return go_json({"sparseCluster" if before_2023 else "cluster": sparse, "task": task})


def tf_configs(job, domain="", before_2023=False):
    cluster = operator_cluster(job, domain)
    distributed = is_distributed(job)
    for rtype, replica in job["spec"]["tfReplicaSpecs"].items():
        t = rtype.lower()
        container = tf_container(replica) or {}
        run = {"command": container.get("command", []), "args": container.get("args", []),
               "restartPolicy": replica.get("restartPolicy", "Never")}
        for i in range(replica.get("replicas", 1)):
            config = operator_tf_config(job, cluster, t, i, before_2023) if distributed else None
            yield "%s-%d" % (t, i), cluster[t][i].rsplit(":", 1)[0], config, run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("manifest")
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--crd", default=os.path.join(here, "../../deploy/k8s/crd/kubeflow.org_tfjobs.yaml"))
    parser.add_argument("--tf_configs", help="write each replica's TF_CONFIG here (JSON lines)")
    parser.add_argument("--cluster_domain", default="",
                        help="the operator's CUSTOM_CLUSTER_DOMAIN (e.g. cluster.local)")
    parser.add_argument("--operator_before_2023", action="store_true",
                        help="TF_CONFIG as operators released before May 2023 wrote it "
                             "(a dynamic-worker job's cluster under \"sparseCluster\")")
    args = parser.parse_args()
    try:
        schema = load_schema(args.crd)
        with open(args.manifest) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        print("validate_tfjob: %s" % e, file=sys.stderr)
        return 2
    problems = []
    jobs = []
    for n, doc in enumerate(docs):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        where = "document %d (%s)" % (n + 1, kind)
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not kind:
            problems.append("%s: no apiVersion/kind" % where)
            continue
        if not doc.get("metadata", {}).get("name"):
            problems.append("%s: no metadata.name" % where)
        if kind == "TFJob":
            if doc["apiVersion"] != "kubeflow.org/v1":
                problems.append("%s: apiVersion %s, expected kubeflow.org/v1" % (where, doc["apiVersion"]))
            validator = jsonschema.Draft7Validator(schema)
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
                problems.append("%s: %s: %s" % (where, "/".join(str(p) for p in e.path), e.message))
            pruned = []
            pruned_fields(doc, schema, "", pruned)
            problems.extend("%s: unknown field %s (the API server would drop it)" % (where, p)
                            for p in pruned)
            operator_rules(doc, problems)
            jobs.append(doc)
        elif kind == "Secret":
            if not isinstance(doc.get("data", {}), dict):
                problems.append("%s: data must be a map" % where)
        elif kind == "PersistentVolumeClaim":
            if not doc.get("spec", {}).get("accessModes"):
                problems.append("%s: no spec.accessModes" % where)
        else:
            problems.append("%s: unexpected kind" % where)
    if not jobs:
        problems.append("no TFJob in %s" % args.manifest)
    for p in problems:
        print("validate_tfjob: %s" % p, file=sys.stderr)
    if problems:
        return 1
    if args.tf_configs:
        with open(args.tf_configs, "w") as out:
            for job in jobs:
                for replica, service, config, run in tf_configs(job, args.cluster_domain,
                                                                args.operator_before_2023):
                    line = {"replica": replica, "service": service, "tf_config": config}
                    line.update(run)
                    out.write(json.dumps(line) + "\n")
    print("validate_tfjob: %s: %d TFJob(s) valid against %s" % (args.manifest, len(jobs),
                                                                 os.path.basename(args.crd)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
