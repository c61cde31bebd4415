#include "launcher/supervisor/task_cpu.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr char kFile[] = "/task_cpu.csv";

}  // namespace

absl::StatusOr<double> LiveProcessCpuSeconds(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": ", ec.message()));
  // schedstat's first field: nanoseconds on a CPU (user and system).
  double ns = 0;
  for (const auto& thread : it) {
    std::ifstream in(thread.path().string() + "/schedstat");
    double run_ns = 0;
    if (in >> run_ns) ns += run_ns;  // a thread that just exited is skipped
  }
  return ns * 1e-9;
}

absl::StatusOr<std::unique_ptr<TaskCpuLog>> TaskCpuLog::Open(const std::string& run_dir, bool append) {
  ASSIGN_OR_RETURN(std::unique_ptr<CsvWriter> csv,
                   CsvWriter::Open(run_dir + kFile, {"unix_time", "task", "cpu_seconds"}, append));
  return std::unique_ptr<TaskCpuLog>(new TaskCpuLog(std::move(csv)));
}

absl::Status TaskCpuLog::Record(const std::string& task, double cpu_seconds) {
  const double now = UnixMicros() * 1e-6;
  return csv_->Row({absl::StrFormat("%.6f", now), task, absl::StrFormat("%.6f", cpu_seconds)});
}

absl::StatusOr<std::map<std::string, std::vector<CpuSample>>> ReadTaskCpu(const std::string& run_dir) {
  const std::string path = run_dir + kFile;
  if (!FileExists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  ASSIGN_OR_RETURN(const CsvTable table, ReadCsv(path));
  const int time = table.Column("unix_time"), task = table.Column("task"), cpu = table.Column("cpu_seconds");
  if (time < 0 || task < 0 || cpu < 0) {
    return absl::DataLossError(absl::StrCat(path, ": expected columns unix_time, task, cpu_seconds"));
  }
  std::map<std::string, std::vector<CpuSample>> out;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    CpuSample s;
    if (!absl::SimpleAtod(table.rows[r][time], &s.unix_s) || !absl::SimpleAtod(table.rows[r][cpu], &s.cpu_seconds)) {
      return absl::DataLossError(absl::StrCat(path, ": row ", r + 2, " is not numbers"));
    }
    out[table.rows[r][task]].push_back(s);
  }
  return out;
}

std::optional<std::pair<CpuSample, CpuSample>> SamplesWithin(const std::vector<CpuSample>& samples,
                                                             double from, double to) {
  std::optional<CpuSample> first, last;
  for (const CpuSample& s : samples) {
    if (s.unix_s < from || s.unix_s > to) continue;
    if (!first) first = s;
    last = s;
  }
  if (!first || !(last->unix_s > first->unix_s)) return std::nullopt;
  return std::make_pair(*first, *last);
}

}  // namespace pstrain
