#include "checkpoint/framing.h"

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace pstrain {

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(absl::string_view in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

std::string FrameFile(absl::string_view magic, absl::string_view header,
                      absl::string_view payload) {
  std::string out(magic);
  out.reserve(kFramePreambleBytes + header.size() + payload.size());
  PutLittleEndian(header.size(), 4, &out);
  PutLittleEndian(Fnv1a64(header), 8, &out);
  absl::StrAppend(&out, header, payload);
  return out;
}

absl::StatusOr<FramedFile> UnframeFile(absl::string_view in, absl::string_view magic,
                                       uint32_t max_header_bytes, const std::string& path,
                                       absl::string_view what) {
  auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, ": damaged ", what, ": ", why));
  };
  if (in.size() < kFramePreambleBytes || in.substr(0, magic.size()) != magic) {
    return damaged(absl::StrCat("not a pstrain ", what, " (bad magic or too short)"));
  }
  const uint64_t header_bytes = GetLittleEndian(in.substr(8), 4);
  if (header_bytes > max_header_bytes || kFramePreambleBytes + header_bytes > in.size()) {
    return damaged(absl::StrCat("header length ", header_bytes, " in a file of ", in.size(),
                                " bytes"));
  }
  FramedFile f{in.substr(kFramePreambleBytes, header_bytes),
               in.substr(kFramePreambleBytes + header_bytes)};
  if (Fnv1a64(f.header) != GetLittleEndian(in.substr(12), 8)) {
    return damaged("header checksum mismatch");
  }
  return f;
}

absl::Status WriteFileInDir(const std::string& path, absl::string_view contents) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  return WriteFileAtomic(path, contents);
}

}  // namespace pstrain
