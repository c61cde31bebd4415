#include "ps_server/shard_checkpoint.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr absl::string_view kMagic = "PSTRCKPT";
constexpr size_t kPreambleBytes = 8 + 4 + 8;  // magic, header length, header checksum
// A header is small (counters and the job); anything larger is damage.
constexpr uint32_t kMaxHeaderBytes = 1 << 20;

static_assert(sizeof(float) == 4, "f32 payloads");

void PutLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittleEndian(absl::string_view in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

absl::string_view Bytes(absl::Span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

absl::Status Damaged(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": damaged checkpoint: ", what));
}

absl::Status Mismatch(const std::string& path, absl::string_view field, const std::string& file,
                      const std::string& wanted) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": checkpoint of another job: ", field,
                                                    " is ", file, " in the file, ", wanted,
                                                    " here"));
}

// The payload after the header: params then momentum, each `n` floats.
absl::Status DecodePayload(absl::string_view payload, const std::string& path,
                           ShardCheckpoint* c) {
  const proto::ShardCheckpointHeader& h = c->header;
  if (h.range_end() <= h.range_begin() || h.range_end() - h.range_begin() > (uint64_t{1} << 40)) {
    return Damaged(path, absl::StrCat("range [", h.range_begin(), ", ", h.range_end(), ")"));
  }
  const uint64_t n = h.range_end() - h.range_begin();
  if (h.payload_bytes() != 2 * n * sizeof(float) || payload.size() != h.payload_bytes()) {
    return Damaged(path, absl::StrCat(payload.size(), " payload bytes for a range of ", n,
                                      " floats (header says ", h.payload_bytes(), ")"));
  }
  if (Fnv1a64(payload) != h.payload_checksum()) return Damaged(path, "payload checksum mismatch");
  c->params.resize(n);
  c->momentum.resize(n);
  std::memcpy(c->params.data(), payload.data(), n * sizeof(float));
  std::memcpy(c->momentum.data(), payload.data() + n * sizeof(float), n * sizeof(float));
  return absl::OkStatus();
}

}  // namespace

uint64_t PayloadChecksum(absl::Span<const float> params, absl::Span<const float> momentum) {
  return Fnv1a64(Bytes(momentum), Fnv1a64(Bytes(params)));
}

std::string EncodeShardCheckpoint(ShardCheckpoint* c) {
  CHECK_EQ(c->params.size(), c->momentum.size());
  proto::ShardCheckpointHeader& h = c->header;
  h.set_format_version(proto::CHECKPOINT_FORMAT_V1);
  h.set_encoding(proto::F32);
  h.set_payload_bytes(2 * c->params.size() * sizeof(float));
  h.set_payload_checksum(PayloadChecksum(c->params, c->momentum));
  const std::string header = h.SerializeAsString();
  std::string out(kMagic);
  out.reserve(kPreambleBytes + header.size() + h.payload_bytes());
  PutLittleEndian(header.size(), 4, &out);
  PutLittleEndian(Fnv1a64(header), 8, &out);
  absl::StrAppend(&out, header, Bytes(c->params), Bytes(c->momentum));
  return out;
}

absl::StatusOr<ShardCheckpoint> DecodeShardCheckpoint(const std::string& bytes,
                                                      const std::string& path) {
  const absl::string_view in(bytes);
  if (in.size() < kPreambleBytes || in.substr(0, kMagic.size()) != kMagic) {
    return Damaged(path, "not a pstrain shard checkpoint (bad magic or too short)");
  }
  const uint64_t header_bytes = GetLittleEndian(in.substr(8), 4);
  if (header_bytes > kMaxHeaderBytes || kPreambleBytes + header_bytes > in.size()) {
    return Damaged(path, absl::StrCat("header length ", header_bytes, " in a file of ", in.size(),
                                      " bytes"));
  }
  const absl::string_view header = in.substr(kPreambleBytes, header_bytes);
  if (Fnv1a64(header) != GetLittleEndian(in.substr(12), 8)) {
    return Damaged(path, "header checksum mismatch");
  }
  ShardCheckpoint c;
  if (!c.header.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
    return Damaged(path, "header does not parse");
  }
  if (c.header.format_version() != proto::CHECKPOINT_FORMAT_V1) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": checkpoint format version ", c.header.format_version(), "; this build reads ",
        proto::CHECKPOINT_FORMAT_V1));
  }
  if (c.header.encoding() != proto::F32) {
    return Damaged(path, absl::StrCat("payload encoding ", c.header.encoding()));
  }
  RETURN_IF_ERROR(DecodePayload(in.substr(kPreambleBytes + header_bytes), path, &c));
  return c;
}

absl::Status WriteShardCheckpoint(const std::string& path, ShardCheckpoint* checkpoint) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  return WriteFileAtomic(path, EncodeShardCheckpoint(checkpoint));
}

absl::StatusOr<ShardCheckpoint> ReadShardCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  return DecodeShardCheckpoint(bytes, path);
}

absl::Status CheckShardCheckpoint(const ShardCheckpoint& c, const ShardCheckpointExpectation& e,
                                  const std::string& path) {
  const proto::ShardCheckpointHeader& h = c.header;
  auto range = [](uint64_t b, uint64_t end) { return absl::StrCat("[", b, ", ", end, ")"); };
  if (h.shard_index() != e.shard_index || h.num_shards() != e.num_shards) {
    return Mismatch(path, "the shard", absl::StrCat(h.shard_index(), " of ", h.num_shards()),
                    absl::StrCat(e.shard_index, " of ", e.num_shards));
  }
  if (h.range_begin() != e.range_begin || h.range_end() != e.range_end) {
    return Mismatch(path, "the range", range(h.range_begin(), h.range_end()),
                    range(e.range_begin, e.range_end));
  }
  if (h.plan_fingerprint() != e.plan_fingerprint) {
    return Mismatch(path, "the plan fingerprint", absl::StrCat(absl::Hex(h.plan_fingerprint())),
                    absl::StrCat(absl::Hex(e.plan_fingerprint)));
  }
  if (e.payload_checksum != 0 && h.payload_checksum() != e.payload_checksum) {
    return absl::DataLossError(absl::StrCat(
        path, ": its checksum ", absl::Hex(h.payload_checksum()), " is not the manifest's ",
        absl::Hex(e.payload_checksum), " (a file of another save)"));
  }
  if (e.job == nullptr) return absl::OkStatus();
  const proto::JobConfig& j = h.job();
  if (j.mode() != e.job->mode()) {
    return Mismatch(path, "the mode", proto::UpdateMode_Name(j.mode()),
                    proto::UpdateMode_Name(e.job->mode()));
  }
  if (j.num_workers() != e.job->num_workers()) {
    return Mismatch(path, "num_workers", absl::StrCat(j.num_workers()),
                    absl::StrCat(e.job->num_workers()));
  }
  if (j.momentum() != e.job->momentum() || j.nesterov() != e.job->nesterov() ||
      j.weight_decay() != e.job->weight_decay()) {
    return Mismatch(path, "the optimizer (momentum, nesterov, weight_decay)",
                    absl::StrCat(j.momentum(), ", ", j.nesterov(), ", ", j.weight_decay()),
                    absl::StrCat(e.job->momentum(), ", ", e.job->nesterov(), ", ",
                                 e.job->weight_decay()));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
