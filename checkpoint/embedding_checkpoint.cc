#include "checkpoint/embedding_checkpoint.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/framing.h"
#include "common/embedding.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

constexpr absl::string_view kEmbeddingMagic = "PSTREMB1";
constexpr uint32_t kMaxHeaderBytes = 64 << 20;  // up to 1,024 tables' configs and counters
constexpr uint32_t kFormatVersion = 1;

template <typename T>
void Append(const std::vector<T>& values, std::string* out) {
  if (!values.empty()) {
    out->append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
}

absl::Status DamagedEmbeddings(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": damaged embedding checkpoint: ", what));
}

size_t StrideOf(const proto::EmbeddingTableConfig& config) {
  return static_cast<size_t>(config.dim()) * (1 + RowSlots(config.optimizer()));
}

// The payload bytes a table's meta claims, or an error for absurd counts.
absl::StatusOr<uint64_t> TableBytes(const proto::EmbeddingTableCheckpoint& meta,
                                    const std::string& path) {
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  if (meta.config().dim() < 1 || meta.config().dim() > kMaxEmbeddingDim ||
      !proto::RowOptimizer_IsValid(meta.config().optimizer())) {
    return DamagedEmbeddings(path, "a table of a dim or optimizer out of range");
  }
  if (meta.rows() < 0 || meta.rows() > kMaxCount || meta.deleted() < 0 ||
      meta.deleted() > kMaxCount || meta.waiting() < 0 || meta.waiting() > kMaxCount) {
    return DamagedEmbeddings(path, "a count out of range");
  }
  const uint64_t row = 2 * sizeof(int64_t) + StrideOf(meta.config()) * sizeof(float);
  return static_cast<uint64_t>(meta.rows()) * row +
         static_cast<uint64_t>(meta.deleted()) * sizeof(int64_t) +
         static_cast<uint64_t>(meta.waiting()) * 2 * sizeof(int64_t);
}

}  // namespace

size_t EmbeddingTableState::stride() const { return StrideOf(meta.config()); }

std::string EmbeddingFileName(int64_t step, int shard, int num_shards) {
  return absl::StrCat("ckpt-", step, "/embedding-", shard, "-of-", num_shards, ".ckpt");
}

std::string EncodeEmbeddingCheckpoint(EmbeddingCheckpoint* c) {
  std::string payload;
  proto::EmbeddingCheckpointHeader& h = c->header;
  h.set_format_version(kFormatVersion);
  h.clear_tables();
  for (EmbeddingTableState& t : c->tables) {
    t.meta.set_rows(static_cast<int64_t>(t.ids.size()));
    t.meta.set_deleted(static_cast<int64_t>(t.deleted.size()));
    t.meta.set_waiting(static_cast<int64_t>(t.waiting.size()));
    *h.add_tables() = t.meta;
    const size_t stride = t.stride();
    for (size_t i = 0; i < t.ids.size(); ++i) {
      PutLittleEndian(static_cast<uint64_t>(t.ids[i]), 8, &payload);
      PutLittleEndian(static_cast<uint64_t>(t.last_updates[i]), 8, &payload);
      payload.append(reinterpret_cast<const char*>(t.floats.data() + i * stride),
                     stride * sizeof(float));
    }
    Append(t.deleted, &payload);
    for (const auto& [id, touches] : t.waiting) {
      PutLittleEndian(static_cast<uint64_t>(id), 8, &payload);
      PutLittleEndian(static_cast<uint64_t>(touches), 8, &payload);
    }
  }
  h.set_payload_bytes(payload.size());
  h.set_payload_checksum(Fnv1a64(payload));
  return FrameFile(kEmbeddingMagic, h.SerializeAsString(), payload);
}

absl::StatusOr<EmbeddingCheckpoint> DecodeEmbeddingCheckpoint(absl::string_view bytes,
                                                              const std::string& path) {
  ASSIGN_OR_RETURN(const FramedFile f, UnframeFile(bytes, kEmbeddingMagic, kMaxHeaderBytes, path,
                                                   "embedding checkpoint"));
  const absl::string_view header = f.header;
  EmbeddingCheckpoint c;
  if (!c.header.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
    return DamagedEmbeddings(path, "header does not parse");
  }
  if (c.header.format_version() != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": embedding checkpoint format ", c.header.format_version(), "; this build reads ",
        kFormatVersion));
  }
  const absl::string_view payload = f.payload;
  if (c.header.tables_size() > kMaxEmbeddingTables) {
    return DamagedEmbeddings(path, absl::StrCat(c.header.tables_size(), " tables"));
  }
  uint64_t want = 0;
  for (const proto::EmbeddingTableCheckpoint& meta : c.header.tables()) {
    ASSIGN_OR_RETURN(const uint64_t b, TableBytes(meta, path));
    if (b > payload.size() - want) {  // no sum that wraps around: the bytes must be there
      return DamagedEmbeddings(
          path, absl::StrCat("tables of more bytes than the payload's ", payload.size()));
    }
    want += b;
  }
  if (payload.size() != want || c.header.payload_bytes() != want) {
    return DamagedEmbeddings(path,
                             absl::StrCat(payload.size(), " payload bytes where the header says ",
                                          c.header.payload_bytes(), " and its tables ", want));
  }
  if (Fnv1a64(payload) != c.header.payload_checksum()) {
    return DamagedEmbeddings(path, "payload checksum mismatch");
  }
  size_t at = 0;
  auto next = [&](int width) {
    const uint64_t v = GetLittleEndian(payload.substr(at), width);
    at += static_cast<size_t>(width);
    return static_cast<int64_t>(v);
  };
  for (const proto::EmbeddingTableCheckpoint& meta : c.header.tables()) {
    EmbeddingTableState t;
    t.meta = meta;
    const size_t stride = t.stride(), rows = static_cast<size_t>(meta.rows());
    t.ids.resize(rows);
    t.last_updates.resize(rows);
    t.floats.resize(rows * stride);
    for (size_t i = 0; i < rows; ++i) {
      t.ids[i] = next(8);
      t.last_updates[i] = next(8);
      std::memcpy(t.floats.data() + i * stride, payload.data() + at, stride * sizeof(float));
      at += stride * sizeof(float);
    }
    for (int64_t i = 0; i < meta.deleted(); ++i) t.deleted.push_back(next(8));
    for (int64_t i = 0; i < meta.waiting(); ++i) {
      const int64_t id = next(8);
      t.waiting.emplace_back(id, next(8));
    }
    c.tables.push_back(std::move(t));
  }
  return c;
}

absl::Status WriteEmbeddingCheckpoint(const std::string& path, EmbeddingCheckpoint* checkpoint) {
  return WriteFileInDir(path, EncodeEmbeddingCheckpoint(checkpoint));
}

absl::StatusOr<EmbeddingCheckpoint> ReadEmbeddingCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, ReadFileToString(path));
  return DecodeEmbeddingCheckpoint(bytes, path);
}

}  // namespace pstrain
