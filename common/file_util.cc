#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

// "PATH: WHAT: strerror"; ResourceExhausted for a full disk or quota,
// Internal otherwise.
absl::Status ErrnoError(int err, const std::string& path, absl::string_view what) {
  const std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// Writes all of `data` to `fd`, through short writes and EINTR. `*written`
// counts the bytes that made it.
int WriteAll(int fd, absl::string_view data, size_t* written) {
  *written = 0;
  while (*written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + *written, data.size() - *written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;  // a regular file takes no bytes only when full
    *written += static_cast<size_t>(n);
  }
  return 0;
}

int FsyncRetrying(int fd) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// Writes `contents` to the temporary file `tmp` and fsyncs it, so that the
// rename publishes whole contents even across a crash. On error `tmp` is
// removed and `path` untouched; the error names `path`.
absl::Status WriteAndSync(const std::string& path, const std::string& tmp,
                          absl::string_view contents) {
  int fd;
  do {
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, path, absl::StrCat("cannot create ", tmp));
  size_t written = 0;
  absl::Status status;
  if (const int err = WriteAll(fd, contents, &written); err != 0) {
    status = ErrnoError(err, path, absl::StrCat("write failed after ", written, " of ",
                                                contents.size(), " bytes; left unchanged"));
  } else if (const int sync_err = FsyncRetrying(fd); sync_err != 0) {
    status = ErrnoError(sync_err, path, "fsync failed; left unchanged");
  }
  // close() may report a delayed write error (NFS); never retried on EINTR.
  if (::close(fd) != 0 && status.ok() && errno != EINTR) {
    status = ErrnoError(errno, path, "close failed; left unchanged");
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

// fsyncs the directory holding `path`, so that the rename itself is durable.
absl::Status SyncDirectory(const std::string& path) {
  const std::string dir = SplitPath(path).dir;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, path, absl::StrCat("cannot open its directory ", dir, " to fsync"));
  const int err = FsyncRetrying(fd);
  ::close(fd);
  if (err != 0) return ErrnoError(err, path, absl::StrCat("fsync of its directory ", dir, " failed"));
  return absl::OkStatus();
}

}  // namespace

namespace {

// Why `path` did not open for reading: NotFound, or Internal with errno's reason.
absl::Status OpenError(const std::string& path) {
  if (!FileExists(path)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  return absl::InternalError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return OpenError(path);
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read error"));
  return out.str();
}

absl::StatusOr<std::string> ReadFilePrefix(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return OpenError(path);
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return absl::InternalError(absl::StrCat(path, ": read error"));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  RETURN_IF_ERROR(WriteAndSync(path, tmp, contents));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(err, path, absl::StrCat("cannot rename ", tmp, " to it"));
  }
  return SyncDirectory(path);
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": cannot create directory: ", ec.message()));
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

PathParts SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace pstrain
