// `pstrain k8s`, a TFJob manifest for the spec's job, and `pstrain task`,
// the entrypoint of the containers that manifest runs.

#include "launcher/cli/commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "flags/task_flags.h"
#include "glog/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "launcher/cli/shared_flags.h"
#include "launcher/k8s/k8s_manifest.h"
#include "transport/job_secret.h"
#include "worker/train_flags.h"

ABSL_FLAG(std::string, image, "", "k8s: the container image every replica runs");
ABSL_FLAG(std::string, worker_image, "",
          "k8s with a command after --: the image the chief and worker replicas run it in (a "
          "PyTorch image with pstrain's /opt/pstrain copied in; default: --image)");
ABSL_FLAG(std::string, name, "", "k8s: the TFJob's name (a DNS-1035 label)");
ABSL_FLAG(std::string, namespace, "default", "k8s: the Kubernetes namespace");
ABSL_FLAG(int, gpus_per_worker, 0, "k8s: nvidia.com/gpu per chief and worker replica");
ABSL_FLAG(bool, dynamic_workers, false,
          "k8s: enableDynamicWorker: each replica gets a sparse TF_CONFIG, and workers may be "
          "added and removed while the job runs (async and ssp; no Chief replica: worker 0 is "
          "the chief)");

namespace pstrain {
namespace {

// The manifest's options from --name, --namespace, --image,
// --gpus_per_worker, --dynamic_workers, --worker_image, the training
// flags' --metrics_port, and the job secret of --secret_file.
absl::StatusOr<K8sManifestOptions> K8sOptionsFromFlags(const TrainOptions& train) {
  K8sManifestOptions o;
  o.name = absl::GetFlag(FLAGS_name);
  o.k8s_namespace = absl::GetFlag(FLAGS_namespace);
  o.image = absl::GetFlag(FLAGS_image);
  o.gpus_per_worker = absl::GetFlag(FLAGS_gpus_per_worker);
  o.dynamic_workers = absl::GetFlag(FLAGS_dynamic_workers);
  if (o.dynamic_workers && train.mode == proto::SYNC) {
    return absl::InvalidArgumentError(
        "--dynamic_workers with --mode=sync: a sync version waits for every worker, which a "
        "sparse TF_CONFIG does not list; use --mode=async or --mode=ssp");
  }
  if (train.metrics_port != 0) o.metrics_port = train.metrics_port;
  if (!SecretFileFlag().empty()) {
    // Loaded to check it: a damaged file is refused here, not in the pods.
    RETURN_IF_ERROR(JobSecret::Load(SecretFileFlag()).status());
    ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(SecretFileFlag()));
    o.secret_b64 = absl::Base64Escape(bytes);
  }
  o.worker_image = absl::GetFlag(FLAGS_worker_image);
  return o;
}

// What every replica trains with: the flags given, with the paths of its
// pod and its metrics endpoint.
TrainOptions PodTrainOptions(TrainOptions train, const K8sManifestOptions& o) {
  const std::string run_dir = absl::StrCat(kPodDataRoot, "/runs/", o.name);
  train.run_dir = run_dir;
  train.data_dir = absl::StrCat(kPodDataRoot, "/mnist");
  train.checkpoint_dir = run_dir + "/checkpoints";
  // A restarted ps is restored from the last checkpoint: keep them coming
  // unless the flags say how often.
  if (train.checkpoint_every_steps == 0 && train.checkpoint_every_s == 0) train.checkpoint_every_s = 60;
  train.metrics_port = o.metrics_port;
  train.metrics_host = "0.0.0.0";
  return train;
}

// The flags of the ps_server and worker replicas (`train`: the pod's).
absl::Status SetReplicaArgs(const TrainOptions& train, K8sManifestOptions* o) {
  const std::string secret_flag = absl::StrCat("--secret_file=", kPodSecretFile);
  o->worker_args = train.ToArgs();
  o->worker_args.push_back(secret_flag);
  ASSIGN_OR_RETURN(PsServerOptions ps, PsOptionsFor(train));
  ps.checkpoint_dir = train.checkpoint_dir;
  ps.metrics_port = o->metrics_port;
  ps.metrics_host = "0.0.0.0";
  o->ps_args = ps.ToArgs();
  o->ps_args.push_back(secret_flag);
  return absl::OkStatus();
}

// The environment a user's command finds in its pod (`train`: the pod's),
// as under `pstrain launch`.
std::vector<std::string> CommandEnv(const TrainOptions& train) {
  std::string flags_json;
  google::protobuf::Value flags;
  for (const std::string& a : train.ToArgs()) {
    flags.mutable_list_value()->add_values()->set_string_value(a);
  }
  (void)google::protobuf::util::MessageToJsonString(flags, &flags_json);
  const std::string root = kPodFrontendRoot;
  return {absl::StrCat("PSTRAIN_SECRET_FILE=", kPodSecretFile),
          absl::StrCat("PSTRAIN_RUN_DIR=", train.run_dir),
          absl::StrCat("PSTRAIN_FLAGS=", flags_json),
          absl::StrCat("PSTRAIN_LIBRARY=", root, "/lib/libpstrain.so"),
          absl::StrCat("LD_LIBRARY_PATH=", root, "/lib"),
          absl::StrCat("PYTHONPATH=", root, "/python"), "PYTHONUNBUFFERED=1"};
}

// The manifest on stdout, or into --out.
absl::Status WriteManifest(const std::string& manifest) {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fwrite(manifest.data(), 1, manifest.size(), stdout);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(WriteFileAtomic(out, manifest));
  std::printf("pstrain: wrote %s (kubectl apply -f %s)\n", out.c_str(), out.c_str());
  return absl::OkStatus();
}

}  // namespace

// pstrain k8s: the TFJob manifest for --cluster_spec's task counts, each
// replica with the training flags given here and the paths of its pod.
// What follows "--" is run by the Chief and Worker replicas (as written:
// the program is looked up in their image).
absl::Status RunK8sCommand(int argc, char** argv) {
  const size_t n = ArgsAfterDashes(argc, argv);
  const std::vector<std::string> command(argv + argc - n, argv + argc);
  const std::string spec_path = ClusterSpecFlag();
  if (spec_path.empty()) return absl::InvalidArgumentError("k8s needs --cluster_spec=FILE");
  ASSIGN_OR_RETURN(const ClusterSpec spec, ClusterSpec::FromFile(spec_path));
  ASSIGN_OR_RETURN(const TrainOptions train, TrainOptionsFromFlags());
  ASSIGN_OR_RETURN(K8sManifestOptions o, K8sOptionsFromFlags(train));
  const TrainOptions pod = PodTrainOptions(train, o);
  RETURN_IF_ERROR(SetReplicaArgs(pod, &o));
  o.worker_command = command;
  if (!command.empty()) o.worker_env = CommandEnv(pod);
  ASSIGN_OR_RETURN(const std::string manifest, TfJobManifest(spec, o));
  return WriteManifest(manifest);
}

// pstrain task -- FLAGS: what a container runs. Becomes ps_server (a ps
// task) or worker (chief, worker) of this pstrain's directory, with FLAGS,
// by $TF_CONFIG's task type.
absl::Status RunTask(const std::vector<std::string>& flags) {
  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config == nullptr || *tf_config == '\0') {
    return absl::InvalidArgumentError(
        "pstrain task needs $TF_CONFIG (Kubeflow's training operator sets it for each replica)");
  }
  ASSIGN_OR_RETURN(const ClusterSpec spec, ClusterSpec::FromJson(tf_config, "$TF_CONFIG"));
  if (!spec.task().has_value()) return absl::InvalidArgumentError("$TF_CONFIG names no task");
  const TaskType type = spec.task()->type;
  if (type != TaskType::kPs && type != TaskType::kChief && type != TaskType::kWorker) {
    return absl::InvalidArgumentError(absl::StrCat("$TF_CONFIG's task is ", spec.task()->ToString(),
                                                   ": pstrain runs ps, chief and worker tasks"));
  }
  const std::string binary = BinDir() + (type == TaskType::kPs ? "/ps_server" : "/worker");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& f : flags) argv.push_back(const_cast<char*>(f.c_str()));
  argv.push_back(nullptr);
  LOG(INFO) << "pstrain task: " << spec.task()->ToString() << ": exec " << binary;
  google::FlushLogFiles(google::GLOG_INFO);
  execv(binary.c_str(), argv.data());
  return absl::InternalError(absl::StrCat("cannot run ", binary, ": ", std::strerror(errno)));
}

}  // namespace pstrain
