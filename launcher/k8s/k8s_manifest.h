#pragma once

// `pstrain k8s`: a Kubernetes manifest that runs a cluster spec's job as a
// Kubeflow TFJob (kubeflow.org/v1), the way users run ParameterServerStrategy
// jobs on a cluster:
//   - a TFJob with one replica spec per task type of the spec (PS, Chief,
//     Worker; with dynamic workers PS and Worker only), each pod running
//     the image's `pstrain task`, which starts ps_server or worker by
//     TF_CONFIG's task type (the operator writes
//     TF_CONFIG; launcher/task_entry.h);
//   - restartPolicy OnFailure: a failed replica is restarted alone, and
//     rejoins (the tasks recover themselves;
//     docs/decisions/0013-recovery-by-rejoin.md);
//   - the job secret as a Kubernetes Secret mounted read-only into every
//     replica (--secret_file=/etc/pstrain/job.secret); the manifest holds
//     the secret itself only when asked (`secret_b64`), otherwise a comment
//     says how to create it;
//   - one volume for the data, the run directory and the checkpoints (a
//     PersistentVolumeClaim, ReadWriteMany: every replica writes there);
//   - resource requests, `nvidia.com/gpu` limits for GPU workers, a non-root
//     security context, the tfjob-port and a metrics port with Prometheus's
//     usual scrape annotations (prometheus.io/scrape, port, path).
// The tests validate what this writes against the TFJob CRD's
// openAPIV3Schema (tools/k8s/validate_tfjob.py) and derive each replica's
// TF_CONFIG from it as the training operator does.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/cluster_spec.h"

namespace pstrain {

struct K8sManifestOptions {
  std::string name;                    // the TFJob's name: a DNS-1035 label
  std::string k8s_namespace = "default";
  std::string image;                   // e.g. "registry.example/pstrain:1.0"
  int port = 2222;                     // the tfjob-port of every replica
  int metrics_port = 9100;             // /metrics of every replica (0: none)
  int gpus_per_worker = 0;             // nvidia.com/gpu per chief/worker replica
  // spec.enableDynamicWorker: the operator writes sparse TF_CONFIGs and
  // workers may come and go. No Chief replica is written (the operator
  // gives a Chief an empty cluster): PS and Worker replicas only, a spec's
  // chief being one more Worker, and worker 0 is the chief
  // (common/cluster_spec.h).
  bool dynamic_workers = false;
  // Base64 of the job secret file, to put into the Secret; empty: the
  // Secret is created apart (kubectl create secret generic ...).
  std::string secret_b64;
  std::string data_claim;              // PVC name; empty: <name>-data
  // Flags of every chief/worker replica (training flags; paths are set
  // here: --data_dir, --run_dir, --checkpoint_dir, --secret_file,
  // --metrics_port) and of every ps replica.
  std::vector<std::string> worker_args;
  std::vector<std::string> ps_args;
  // A program of the user's (`pstrain k8s ... -- python3 /app/train.py`):
  // the Chief and Worker replicas run it, in `worker_image` (empty: `image`),
  // instead of `pstrain task`, with `worker_env` ("NAME=value": the C API's
  // environment, include/pstrain/c_api.h) and without worker_args. Empty:
  // `pstrain task`.
  std::vector<std::string> worker_command;
  std::string worker_image;
  std::vector<std::string> worker_env;
};

// Where pstrain's image keeps the C API's library (and the libraries it
// loads) and the Python package, for a PyTorch image to copy
// (deploy/Dockerfile).
inline constexpr char kPodFrontendRoot[] = "/opt/pstrain";

// Where a replica finds things, in its container.
inline constexpr char kPodSecretFile[] = "/etc/pstrain/job.secret";
inline constexpr char kPodDataRoot[] = "/data";

// The manifest (YAML, a Secret and a TFJob; plus the PVC when none is
// named) for `spec`'s task counts. InvalidArgument naming the option for a
// bad name, namespace, image or port, or a spec with a task type a TFJob
// of pstrain cannot run (an evaluator).
absl::StatusOr<std::string> TfJobManifest(const ClusterSpec& spec, const K8sManifestOptions& options);

// Whether `name` is a DNS-1035 label of at most `max_length` characters:
// [a-z]([-a-z0-9]*[a-z0-9])?.
bool IsDns1035Label(const std::string& name, size_t max_length = 63);

}  // namespace pstrain
