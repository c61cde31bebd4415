#include "checkpoint/shard_checkpoint.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/framing.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/optimizer.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr absl::string_view kMagic = "PSTRCKPT";
// A header is small (counters and the job); anything larger is damage.
constexpr uint32_t kMaxCheckpointHeaderBytes = 1 << 20;

static_assert(sizeof(float) == 4, "f32 payloads");

absl::string_view Bytes(absl::Span<const float> values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)};
}

absl::Status Damaged(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": damaged checkpoint: ", what));
}

std::string Describe(const absl::StatusOr<OptimizerConfig>& optimizer) {
  return optimizer.ok() ? DescribeOptimizer(*optimizer) : std::string(optimizer.status().message());
}

absl::Status Mismatch(const std::string& path, absl::string_view field, const std::string& file,
                      const std::string& wanted) {
  return absl::FailedPreconditionError(absl::StrCat(path, ": checkpoint of another job: ", field,
                                                    " is ", file, " in the file, ", wanted,
                                                    " here"));
}

// The floats of the file's state: its range's parameters and the slots of
// its optimizer (format version 1: SGD's buffer).
absl::StatusOr<uint64_t> StateFloatsOf(const proto::ShardCheckpointHeader& h,
                                       const std::string& path) {
  const absl::StatusOr<OptimizerConfig> optimizer = OptimizerFromJob(h.job());
  if (!optimizer.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": a checkpoint of an optimizer this build cannot run: ",
                     optimizer.status().message()));
  }
  if (h.format_version() == proto::CHECKPOINT_FORMAT_V1 && optimizer->kind != proto::SGD) {
    return Damaged(path, "a format version 1 file of another optimizer than sgd");
  }
  return StateFloats(*optimizer, h.range_end() - h.range_begin());
}

// The payload after the header: the state, parameters then slots.
absl::Status DecodePayload(absl::string_view payload, const std::string& path,
                           ShardCheckpoint* c) {
  const proto::ShardCheckpointHeader& h = c->header;
  if (h.range_end() <= h.range_begin() || h.range_end() - h.range_begin() > (uint64_t{1} << 40)) {
    return Damaged(path, absl::StrCat("range [", h.range_begin(), ", ", h.range_end(), ")"));
  }
  ASSIGN_OR_RETURN(const uint64_t floats, StateFloatsOf(h, path));
  if (h.payload_bytes() != floats * sizeof(float) || payload.size() != h.payload_bytes()) {
    return Damaged(path, absl::StrCat(payload.size(), " payload bytes for a state of ", floats,
                                      " floats (header says ", h.payload_bytes(), ")"));
  }
  if (Fnv1a64(payload) != h.payload_checksum()) return Damaged(path, "payload checksum mismatch");
  c->state.resize(floats);
  std::memcpy(c->state.data(), payload.data(), payload.size());
  return absl::OkStatus();
}

bool KnownFormat(uint32_t version) {
  return version == proto::CHECKPOINT_FORMAT_V1 || version == proto::CHECKPOINT_FORMAT_V2;
}

}  // namespace

uint64_t PayloadChecksum(absl::Span<const float> state) { return Fnv1a64(Bytes(state)); }

std::string EncodeShardCheckpoint(ShardCheckpoint* c) {
  proto::ShardCheckpointHeader& h = c->header;
  const absl::StatusOr<OptimizerConfig> optimizer = OptimizerFromJob(h.job());
  CHECK(optimizer.ok()) << optimizer.status();
  CHECK_EQ(c->state.size(), StateFloats(*optimizer, h.range_end() - h.range_begin()));
  h.set_format_version(proto::CHECKPOINT_FORMAT_V2);
  h.set_encoding(proto::F32);
  h.set_payload_bytes(c->state.size() * sizeof(float));
  h.set_payload_checksum(PayloadChecksum(c->state));
  return FrameFile(kMagic, h.SerializeAsString(), Bytes(c->state));
}

absl::StatusOr<ShardCheckpoint> DecodeShardCheckpoint(const std::string& bytes,
                                                      const std::string& path) {
  ASSIGN_OR_RETURN(const FramedFile f, UnframeFile(bytes, kMagic, kMaxCheckpointHeaderBytes,
                                                   path, "checkpoint"));
  const absl::string_view header = f.header;
  ShardCheckpoint c;
  if (!c.header.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
    return Damaged(path, "header does not parse");
  }
  if (!KnownFormat(c.header.format_version())) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": checkpoint format version ", c.header.format_version(), "; this build reads ",
        proto::CHECKPOINT_FORMAT_V1, " and ", proto::CHECKPOINT_FORMAT_V2));
  }
  if (c.header.encoding() != proto::F32) {
    return Damaged(path, absl::StrCat("payload encoding ", c.header.encoding()));
  }
  RETURN_IF_ERROR(DecodePayload(f.payload, path, &c));
  return c;
}

absl::Status WriteShardCheckpoint(const std::string& path, ShardCheckpoint* checkpoint) {
  return WriteFileInDir(path, EncodeShardCheckpoint(checkpoint));
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
  const absl::StatusOr<OptimizerConfig> file = OptimizerFromJob(j);
  const absl::StatusOr<OptimizerConfig> here = OptimizerFromJob(*e.job);
  if (!file.ok() || !here.ok() || !SameOptimizer(*file, *here)) {
    return Mismatch(path, "the optimizer", Describe(file), Describe(here));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
