#pragma once

// The framing every checkpoint file shares (shard files, embedding files):
// an 8-byte magic, the header's length (uint32) and FNV-1a 64 (uint64),
// the header's bytes (a binary protobuf), then the payload; little-endian.
// What the header and payload hold is each format's own.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr size_t kFramePreambleBytes = 8 + 4 + 8;

// magic + preamble + header + payload. REQUIRES: magic.size() == 8.
std::string FrameFile(absl::string_view magic, absl::string_view header,
                      absl::string_view payload);

struct FramedFile {
  absl::string_view header;   // checked against its checksum
  absl::string_view payload;  // everything after it, unchecked
};

// The header and payload of `bytes`, views into it. DataLoss naming `path`
// (as "`path`: damaged `what`: ...") for another magic, a header longer than
// `max_header_bytes` or the file, or a header checksum that does not match.
absl::StatusOr<FramedFile> UnframeFile(absl::string_view bytes, absl::string_view magic,
                                       uint32_t max_header_bytes, const std::string& path,
                                       absl::string_view what);

// Writes `contents` to `path` atomically, making its directory if missing.
absl::Status WriteFileInDir(const std::string& path, absl::string_view contents);

void PutLittleEndian(uint64_t value, int bytes, std::string* out);
uint64_t GetLittleEndian(absl::string_view in, int bytes);

}  // namespace pstrain
