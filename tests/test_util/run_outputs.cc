#include "tests/test_util/run_outputs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/json.h"
#include "gtest/gtest.h"
#include "tests/test_util/process_runner.h"

namespace pstrain::testing {

std::vector<float> ReadFinalParams(const std::string& run_dir) {
  auto bytes = ReadFileToString(run_dir + "/final_params.f32");
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  std::vector<float> params(bytes.ok() ? bytes->size() / sizeof(float) : 0);
  if (!params.empty()) std::memcpy(params.data(), bytes->data(), params.size() * sizeof(float));
  return params;
}

proto::RunSummary ReadRunSummary(const std::string& run_dir) {
  proto::RunSummary summary;
  auto text = ReadFileToString(run_dir + "/summary.json");
  EXPECT_TRUE(text.ok()) << text.status();
  if (text.ok()) {
    const absl::Status s = ParseJsonMessage(*text, run_dir + "/summary.json", &summary);
    EXPECT_TRUE(s.ok()) << s;
  }
  return summary;
}

namespace {

// Size and modification time of `path` ("" when it cannot be read).
std::string FileIdentity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(path, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ";");
}

// Holds an exclusive flock on a file until destroyed.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

std::vector<float> SharedFloats(const std::string& key, const std::vector<std::string>& binaries,
                                const std::function<std::vector<float>()>& compute) {
  std::string identity = absl::StrCat(key, "|", FileIdentity("/proc/self/exe"));
  for (const std::string& b : binaries) identity += FileIdentity(BinaryPath(b));
  const std::string dir = BinaryPath("../test-cache");
  const absl::Status made = MakeDirs(dir);
  if (!made.ok()) {
    ADD_FAILURE() << made;
    return compute();
  }
  const std::string file = absl::StrCat(dir, "/", absl::Hex(Fnv1a64(identity)), ".f32");
  const FileLock lock(file + ".lock");
  auto bytes = ReadFileToString(file);
  if (bytes.ok() && !bytes->empty() && bytes->size() % sizeof(float) == 0) {
    std::vector<float> cached(bytes->size() / sizeof(float));
    std::memcpy(cached.data(), bytes->data(), bytes->size());
    return cached;
  }
  std::vector<float> result = compute();
  // A computation that failed the test is not kept for the others.
  if (result.empty() || ::testing::Test::HasFailure()) return result;
  const absl::Status written =
      WriteFileAtomic(file, absl::string_view(reinterpret_cast<const char*>(result.data()),
                                              result.size() * sizeof(float)));
  if (!written.ok()) ADD_FAILURE() << written;
  return result;
}

}  // namespace pstrain::testing
