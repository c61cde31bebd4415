#include "launcher/k8s/k8s_manifest.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// A YAML scalar in double quotes (YAML's double-quoted style is a superset
// of JSON's strings): nothing in it is read as YAML syntax.
std::string Q(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

bool IsImageReference(const std::string& image) {
  if (image.empty() || image.size() > 255) return false;
  for (const unsigned char c : image) {
    if (c <= ' ' || c == '"' || c == '\'' || c == '\\' || c >= 0x7f) return false;
  }
  return true;
}

struct Replica {
  std::string type;  // "PS", "Chief", "Worker": the TFJob's replica type
  int replicas = 0;
  bool gpu = false;
  const std::vector<std::string>* args = nullptr;
};

// The container's image and what it runs: `pstrain task` with the
// replica's flags, or for a chief or worker the user's command with the C
// API's environment.
std::string ContainerCommand(const K8sManifestOptions& o, const Replica& r) {
  std::string y;
  const bool script = r.type != "PS" && !o.worker_command.empty();
  if (script) {
    // The user's program, in the user's image, with the C API's environment.
    absl::StrAppend(&y, "              image: ", Q(o.worker_image.empty() ? o.image : o.worker_image),
                    "\n", "              command:\n");
    for (const std::string& a : o.worker_command) absl::StrAppend(&y, "                - ", Q(a), "\n");
    absl::StrAppend(&y, "              env:\n");
    for (const std::string& e : o.worker_env) {
      const size_t eq = e.find('=');
      absl::StrAppend(&y, "                - name: ", Q(e.substr(0, eq)), "\n",
                      "                  value: ", Q(e.substr(eq + 1)), "\n");
    }
  } else {
    absl::StrAppend(&y, "              image: ", Q(o.image), "\n",
                    "              command: [\"pstrain\", \"task\", \"--\"]\n",
                    "              args:\n");
    for (const std::string& a : *r.args) absl::StrAppend(&y, "                - ", Q(a), "\n");
  }
  return y;
}

// The container's ports and what it requests.
std::string ContainerResources(const K8sManifestOptions& o, const Replica& r) {
  std::string y = absl::StrCat("              ports:\n", "                - name: tfjob-port\n",
                               "                  containerPort: ", o.port, "\n");
  if (o.metrics_port > 0) {
    absl::StrAppend(&y, "                - name: metrics\n", "                  containerPort: ",
                    o.metrics_port, "\n");
  }
  const bool ps = r.type == "PS";
  absl::StrAppend(&y, "              resources:\n", "                requests:\n",
                  "                  cpu: ", Q(ps ? "1" : "2"), "\n", "                  memory: ",
                  Q(ps ? "512Mi" : "1Gi"), "\n", "                limits:\n",
                  "                  memory: ", Q(ps ? "2Gi" : "4Gi"), "\n");
  if (r.gpu) absl::StrAppend(&y, "                  nvidia.com/gpu: ", o.gpus_per_worker, "\n");
  return y;
}

// The container's security and mounts, and the pod's volumes: the job
// secret and the data claim.
std::string ContainerVolumes(const std::string& claim, const std::string& secret) {
  return absl::StrCat(
      "              securityContext:\n", "                allowPrivilegeEscalation: false\n",
      "                readOnlyRootFilesystem: true\n", "              volumeMounts:\n",
      "                - name: job-secret\n", "                  mountPath: \"/etc/pstrain\"\n",
      "                  readOnly: true\n", "                - name: data\n",
      "                  mountPath: ", Q(kPodDataRoot), "\n", "          volumes:\n",
      "            - name: job-secret\n", "              secret:\n",
      "                secretName: ", Q(secret), "\n",
      "                defaultMode: 256\n",  // 0400: the secret's file is private
      "            - name: data\n", "              persistentVolumeClaim:\n",
      "                claimName: ", Q(claim), "\n");
}

std::string ReplicaSpec(const K8sManifestOptions& o, const Replica& r, const std::string& claim,
                        const std::string& secret) {
  std::string y = absl::StrCat("    ", r.type, ":\n", "      replicas: ", r.replicas, "\n",
                               "      restartPolicy: OnFailure\n", "      template:\n",
                               "        metadata:\n", "          labels:\n",
                               "            app.kubernetes.io/name: pstrain\n",
                               "            app.kubernetes.io/instance: ", Q(o.name), "\n");
  if (o.metrics_port > 0) {
    absl::StrAppend(&y, "          annotations:\n", "            prometheus.io/scrape: \"true\"\n",
                    "            prometheus.io/port: ", Q(absl::StrCat(o.metrics_port)), "\n",
                    "            prometheus.io/path: \"/metrics\"\n");
  }
  absl::StrAppend(&y, "        spec:\n", "          securityContext:\n",
                  "            runAsNonRoot: true\n", "            runAsUser: 10001\n",
                  "            runAsGroup: 10001\n", "            fsGroup: 10001\n",
                  "          containers:\n",
                  // The operator finds the tfjob-port on the container named "tensorflow".
                  "            - name: tensorflow\n");
  absl::StrAppend(&y, ContainerCommand(o, r), ContainerResources(o, r),
                  ContainerVolumes(claim, secret));
  return y;
}

}  // namespace

bool IsDns1035Label(const std::string& name, size_t max_length) {
  if (name.empty() || name.size() > max_length || name[0] < 'a' || name[0] > 'z' ||
      name.back() == '-') {
    return false;
  }
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

namespace {

// InvalidArgument naming the flag for a name, namespace, image, port or
// GPU count a cluster would refuse, or a task type a TFJob of pstrain does
// not run.
absl::Status CheckManifestOptions(const ClusterSpec& spec, const K8sManifestOptions& o) {
  // "<name>-worker-<i>" must stay a label (63): room for the longest suffix.
  if (!IsDns1035Label(o.name, 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--name=\"", o.name, "\": the TFJob's name must be a DNS-1035 label of at most 40 "
        "characters (a-z, 0-9, '-', starting with a letter; its pods' service names add "
        "\"-worker-<i>\")"));
  }
  if (!IsDns1035Label(o.k8s_namespace)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--namespace=\"", o.k8s_namespace, "\": not a DNS label"));
  }
  if (!o.worker_image.empty() && !IsImageReference(o.worker_image)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker_image=\"", o.worker_image, "\": the image that runs the command, e.g. a "
        "PyTorch image with pstrain's ", kPodFrontendRoot, " copied in"));
  }
  if (!IsImageReference(o.image)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--image=\"", o.image, "\": the container image to run, e.g. registry.example/pstrain:1.0"));
  }
  if (o.port < 1 || o.port > 65535 || o.metrics_port < 0 || o.metrics_port > 65535 ||
      o.port == o.metrics_port) {
    return absl::InvalidArgumentError(absl::StrCat("ports ", o.port, " (tfjob-port) and ",
                                                   o.metrics_port, " (metrics) must be distinct "
                                                   "TCP ports"));
  }
  if (o.gpus_per_worker < 0 || o.gpus_per_worker > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus_per_worker=", o.gpus_per_worker, ": 0 to 64"));
  }
  for (const TaskId& id : spec.AllTasks()) {
    if (id.type != TaskType::kPs && id.type != TaskType::kChief && id.type != TaskType::kWorker) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the spec names ", id.ToString(), ": a TFJob of pstrain runs ps, chief and worker "
          "replicas only"));
    }
  }
  return absl::OkStatus();
}

// The manifest's opening comment: what it runs and what to do before
// applying it.
std::string ManifestHeader(const ClusterSpec& spec, const K8sManifestOptions& o, int chiefs,
                           int workers, const std::string& claim, const std::string& secret) {
  const std::string ns = o.k8s_namespace;
  return absl::StrCat(
      "# A pstrain job as a Kubeflow TFJob, written by `pstrain k8s` for ", spec.num_ps(), " ps",
      o.dynamic_workers ? "" : absl::StrCat(", ", chiefs, " chief"), " and ", workers,
      " worker replicas.\n",
      o.dynamic_workers
          ? "# Dynamic workers (enableDynamicWorker): worker 0 is the chief (it initialises the\n"
            "# parameters, evaluates, checkpoints and writes the summary); scale the Worker\n"
            "# replicas up or down while the job runs, never below 1: the operator removes the\n"
            "# highest indices, so worker 0 stays. Add no Chief replica (it would get an empty\n"
            "# cluster and exit).\n"
          : "",
      "# Each pod runs `pstrain task`, which starts ps_server or worker by the TF_CONFIG the\n",
      "# training operator writes (`<job>-<type>-<i>.", ns, ".svc:", o.port, "` per replica).\n",
      "# Before applying it:\n",
      o.secret_b64.empty()
          ? absl::StrCat("#   pstrain keygen --out=job.secret\n",
                         "#   kubectl -n ", ns, " create secret generic ", secret,
                         " --from-file=job.secret=job.secret\n")
          : "#   (the job secret is in this file: keep it out of version control)\n",
      "#   put MNIST's IDX files at /data/mnist on the volume ", claim,
      " (tools/fetch_mnist.sh --dest DIR)\n",
      "# The run directory and checkpoints go to /data/runs/", o.name, "; a failed replica is\n",
      "# restarted alone (restartPolicy OnFailure) and rejoins the job.\n");
}

// The job secret (when the manifest carries it) and the data claim (when
// it makes one).
std::string SecretAndClaim(const K8sManifestOptions& o, const std::string& claim,
                           const std::string& secret) {
  const std::string ns = o.k8s_namespace;
  std::string y;
  if (!o.secret_b64.empty()) {
    absl::StrAppend(&y, "---\n", "apiVersion: v1\n", "kind: Secret\n", "metadata:\n",
                    "  name: ", Q(secret), "\n", "  namespace: ", Q(ns), "\n", "type: Opaque\n",
                    "data:\n", "  job.secret: ", Q(o.secret_b64), "\n");
  }
  if (o.data_claim.empty()) {
    absl::StrAppend(&y, "---\n", "apiVersion: v1\n", "kind: PersistentVolumeClaim\n",
                    "metadata:\n", "  name: ", Q(claim), "\n", "  namespace: ", Q(ns), "\n",
                    "spec:\n", "  accessModes: [\"ReadWriteMany\"]\n", "  resources:\n",
                    "    requests:\n", "      storage: \"10Gi\"\n");
  }
  return y;
}

}  // namespace

absl::StatusOr<std::string> TfJobManifest(const ClusterSpec& spec, const K8sManifestOptions& o) {
  RETURN_IF_ERROR(CheckManifestOptions(spec, o));
  // Dynamic workers: no Chief replica (the operator gives it an empty
  // cluster); the spec's chief, if any, is worker 0.
  const int chiefs = spec.has_chief() && !o.dynamic_workers ? 1 : 0;
  const int workers = spec.num_workers() - chiefs;
  const std::string claim = o.data_claim.empty() ? o.name + "-data" : o.data_claim;
  const std::string secret = o.name + "-job-secret";
  const std::string ns = o.k8s_namespace;
  std::string y = absl::StrCat(ManifestHeader(spec, o, chiefs, workers, claim, secret),
                               SecretAndClaim(o, claim, secret));
  absl::StrAppend(&y, "---\n", "apiVersion: kubeflow.org/v1\n", "kind: TFJob\n", "metadata:\n",
                  "  name: ", Q(o.name), "\n", "  namespace: ", Q(ns), "\n", "spec:\n",
                  "  runPolicy:\n", "    cleanPodPolicy: None\n",
                  o.dynamic_workers ? "  enableDynamicWorker: true\n" : "", "  tfReplicaSpecs:\n");
  absl::StrAppend(&y, ReplicaSpec(o, {"PS", spec.num_ps(), false, &o.ps_args}, claim, secret));
  if (chiefs > 0) {
    absl::StrAppend(&y, ReplicaSpec(o, {"Chief", 1, o.gpus_per_worker > 0, &o.worker_args},
                                    claim, secret));
  }
  if (workers > 0) {
    absl::StrAppend(&y, ReplicaSpec(o, {"Worker", workers, o.gpus_per_worker > 0, &o.worker_args},
                                    claim, secret));
  }
  return y;
}

}  // namespace pstrain
