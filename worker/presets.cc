#include "worker/presets.h"

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, preset, "",
          "Training flags that go together, by name (model, optimizer, schedule, batch, epochs); "
          "flags given on the command line win. mnist_99: cnn_large to 99% test accuracy");

namespace pstrain {

const std::vector<Preset>& Presets() {
  static const std::vector<Preset>* presets = new std::vector<Preset>{
      {"mnist_99",
       "the PyTorch MNIST example's two-convolution net (cnn_large) with Adam and a cosine "
       "schedule: >= 99.0% test accuracy in 2 epochs (1 ps + 2 workers, sync)",
       {{"model", "cnn_large"},
        {"mode", "sync"},
        {"optimizer", "adam"},
        {"lr", "0.002"},
        {"lr_schedule", "cosine"},
        {"warmup_steps", "50"},
        {"batch_size", "64"},
        {"epochs", "2"}}},
  };
  return *presets;
}

absl::Status ApplyPresetFlag(const std::set<std::string>& given) {
  const std::string name = absl::GetFlag(FLAGS_preset);
  if (name.empty()) return absl::OkStatus();
  std::vector<std::string> known;
  for (const Preset& p : Presets()) {
    known.push_back(p.name);
    if (p.name != name) continue;
    for (const auto& [flag, value] : p.flags) {
      if (given.count(flag) > 0) continue;
      absl::CommandLineFlag* f = absl::FindCommandLineFlag(flag);
      std::string error;
      if (f == nullptr || !f->ParseFrom(value, &error)) {
        return absl::InternalError(absl::StrCat("preset ", name, ": --", flag, "=", value, ": ", error));
      }
    }
    LOG(INFO) << "--preset=" << name << ": " << p.what;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--preset=", name, ": no such preset (known: ",
                                                 absl::StrJoin(known, ", "), ")"));
}

}  // namespace pstrain
