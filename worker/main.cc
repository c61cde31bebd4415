// worker: trains on its slice of the data against the cluster's ps tasks.
//
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 1}}' worker --mode=sync
//   worker --cluster_spec=cluster_specs/local_2ps_2w.json --task_type=worker --task_index=1

#include <cstdlib>

#include "absl/flags/usage.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/malloc_policy.h"
#include "common/signals.h"
#include "flags/parse.h"
#include "flags/task_flags.h"
#include "transport/security.h"
#include "worker/presets.h"
#include "worker/train_flags.h"
#include "worker/trainer.h"

namespace {

absl::Status RunWorker(const char* tf_config, const pstrain::Cancellation& stop) {
  auto cluster = pstrain::ResolveTaskConfig(pstrain::TaskConfigSourcesFromFlags(tf_config));
  if (!cluster.ok()) return cluster.status();
  auto options = pstrain::TrainOptionsFromFlags();
  if (!options.ok()) return options.status();
  auto security =
      pstrain::ResolveTransportSecurity(pstrain::SecretFileFlag(), pstrain::InsecureFlag());
  if (!security.ok()) return security.status();
  auto trainer = pstrain::Trainer::Create(*cluster, *options, *security, &stop);
  if (!trainer.ok()) return trainer.status();
  return (*trainer)->Run();
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains one worker (or the chief). Configure with $TF_CONFIG or --cluster_spec, "
      "--task_type=worker|chief, --task_index=I, plus the training flags.");
  pstrain::ParseFlagsOrExit(argc, argv);
  pstrain::InitLogging(argv[0]);
  pstrain::KeepFreedMemoryForReuse();  // a step's large blocks (common/malloc_policy.h)
  const pstrain::Cancellation& stop = pstrain::InstallShutdownHandlers();
  if (absl::Status s = pstrain::ApplyPresetFlag(pstrain::FlagsOnCommandLine(argc, argv)); !s.ok()) {
    return pstrain::ExitWith("worker", s, stop);
  }
  return pstrain::ExitWith("worker", RunWorker(std::getenv("TF_CONFIG"), stop), stop);
}
