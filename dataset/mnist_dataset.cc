#include "dataset/mnist_dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
constexpr int kMaxSide = 1024;
constexpr int kNumClasses = 10;
// The largest header we read: magic plus three dimensions.
constexpr size_t kMaxHeaderBytes = 16;

// What an IDX header declares.
struct IdxHeader {
  size_t header_bytes = 0;
  std::array<uint32_t, 3> dims = {0, 0, 0};
  uint64_t payload_bytes = 0;  // product of the dimensions
};

uint32_t ReadBigEndian32(absl::string_view bytes, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + offset);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

bool IsGzip(absl::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// The whole file. Sized from fstat, so the allocation is bounded by what is
// really on disk, whatever a header inside claims.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InternalError(absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(::fileno(file.get()), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), file.get()));
  if (std::ferror(file.get())) return absl::InternalError(absl::StrCat(path, ": read error"));
  return bytes;
}

// A gzip stream (one or more concatenated members, as `cat a.gz b.gz`
// makes) decoded from memory. Errors are InvalidArgument and name the file.
class GzipStream {
 public:
  GzipStream(const std::string& path, absl::string_view compressed) : path_(path) {
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
    zs_.avail_in = static_cast<uInt>(compressed.size());
    initialised_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipStream() {
    if (initialised_) inflateEnd(&zs_);
  }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  bool finished() const { return finished_; }

  // Decodes up to `size` bytes into `out`; returns how many it wrote.
  absl::StatusOr<size_t> Read(char* out, uInt size) {
    if (!initialised_) return absl::InternalError(absl::StrCat(path_, ": inflateInit2 failed"));
    zs_.next_out = reinterpret_cast<Bytef*>(out);
    zs_.avail_out = size;
    const int ret = inflate(&zs_, Z_NO_FLUSH);
    const size_t written = size - zs_.avail_out;
    RETURN_IF_ERROR(Check(ret));
    return written;
  }

 private:
  absl::Status Check(int ret) {
    if (ret == Z_STREAM_END) return EndMember();
    if (ret == Z_OK) return absl::OkStatus();
    // Read() always offers output space, so no progress means no input left.
    return Error(ret == Z_BUF_ERROR ? "unexpected end of file" : "inflate failed");
  }

  absl::Status EndMember() {
    if (zs_.avail_in == 0) {
      finished_ = true;
      return absl::OkStatus();
    }
    if (!IsGzip(absl::string_view(reinterpret_cast<const char*>(zs_.next_in), zs_.avail_in))) {
      return Error("trailing garbage after the gzip stream");
    }
    inflateReset(&zs_);
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": corrupt gzip stream: ", what,
                                            zs_.msg ? absl::StrCat(" (", zs_.msg, ")") : ""));
  }

  const std::string& path_;
  z_stream zs_{};
  bool initialised_ = false;
  bool finished_ = false;
};

// Gunzips `compressed`, producing at most `limit` bytes: callers pass what an
// IDX header allows plus one, so an oversized stream shows up as trailing
// bytes without being decoded in full. The buffer grows geometrically from a
// guess, never far past what it has filled.
absl::StatusOr<std::string> Gunzip(const std::string& path, absl::string_view compressed,
                                   uint64_t limit) {
  if (compressed.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": gzip file larger than 4 GiB"));
  }
  GzipStream stream(path, compressed);
  std::string out(std::min<uint64_t>(limit, std::max<uint64_t>(6 * compressed.size(), 4096)), '\0');
  size_t produced = 0;
  while (!stream.finished() && produced < limit) {
    if (produced == out.size()) out.resize(std::min<uint64_t>(limit, 2 * out.size()));
    const uInt chunk = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    ASSIGN_OR_RETURN(const size_t n, stream.Read(out.data() + produced, chunk));
    produced += n;
  }
  out.resize(produced);
  return out;
}

absl::Status CheckImageDims(const std::string& path, uint32_t n, uint32_t rows, uint32_t cols) {
  if (rows < 1 || rows > kMaxSide || cols < 1 || cols > kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported image dimensions ", rows, "x",
                                            cols, " (rows and cols must be 1..", kMaxSide, ")"));
  }
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": holds no images"));
  return absl::OkStatus();
}

// Parses the header at the start of `bytes` (which may be only a prefix of
// the file) and checks the magic number and, for images, the dimensions, so
// that payload_bytes cannot overflow: at most 2^32 * 1024 * 1024.
absl::StatusOr<IdxHeader> ParseHeader(const std::string& path, absl::string_view bytes,
                                      uint32_t magic) {
  if (bytes.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated: ", bytes.size(), " bytes, too short for an IDX header"));
  }
  const uint32_t found = ReadBigEndian32(bytes, 0);
  if (found != magic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad magic number 0x%08x (expected 0x%08x)", path, found, magic));
  }
  IdxHeader header;
  const size_t num_dims = magic & 0xff;
  header.header_bytes = 4 + 4 * num_dims;
  if (bytes.size() < header.header_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated: ", bytes.size(),
                                            " bytes, header needs ", header.header_bytes));
  }
  for (size_t d = 0; d < num_dims; ++d) header.dims[d] = ReadBigEndian32(bytes, 4 + 4 * d);
  if (num_dims == 3) {
    RETURN_IF_ERROR(CheckImageDims(path, header.dims[0], header.dims[1], header.dims[2]));
  }
  header.payload_bytes = 1;
  for (size_t d = 0; d < num_dims; ++d) header.payload_bytes *= header.dims[d];
  return header;
}

// `raw` gunzipped when it is gzip, else `raw` itself. A gzip stream is
// decoded only one byte past what its header declares, so a hostile header or
// a gzip bomb costs no more memory than the file's honest size. Errors name
// `path`.
absl::StatusOr<std::string> DecodeIdxBytes(const std::string& path, std::string raw,
                                           uint32_t magic) {
  if (!IsGzip(raw)) return raw;
  ASSIGN_OR_RETURN(const std::string head, Gunzip(path, raw, kMaxHeaderBytes));
  ASSIGN_OR_RETURN(const IdxHeader header, ParseHeader(path, head, magic));
  return Gunzip(path, raw, header.header_bytes + header.payload_bytes + 1);
}

absl::Status CheckSize(const std::string& path, const IdxHeader& header, size_t actual) {
  const uint64_t expected = header.header_bytes + header.payload_bytes;
  if (actual < expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": truncated: header declares ", expected, " bytes, file has ", actual));
  }
  if (actual > expected) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": trailing bytes: header declares ", expected,
                                            " bytes, file has more"));
  }
  return absl::OkStatus();
}

absl::Status ParseImages(const std::string& path, std::string raw, Dataset* dataset) {
  ASSIGN_OR_RETURN(std::string bytes, DecodeIdxBytes(path, std::move(raw), kImagesMagic));
  ASSIGN_OR_RETURN(const IdxHeader header, ParseHeader(path, bytes, kImagesMagic));
  RETURN_IF_ERROR(CheckSize(path, header, bytes.size()));
  dataset->size = header.dims[0];
  dataset->rows = static_cast<int>(header.dims[1]);
  dataset->cols = static_cast<int>(header.dims[2]);
  bytes.erase(0, header.header_bytes);  // in place: no second buffer
  dataset->pixels = std::move(bytes);
  return absl::OkStatus();
}

absl::Status ParseLabels(const std::string& path, std::string raw, Dataset* dataset) {
  ASSIGN_OR_RETURN(const std::string bytes, DecodeIdxBytes(path, std::move(raw), kLabelsMagic));
  ASSIGN_OR_RETURN(const IdxHeader header, ParseHeader(path, bytes, kLabelsMagic));
  RETURN_IF_ERROR(CheckSize(path, header, bytes.size()));
  dataset->labels.resize(header.payload_bytes);
  for (size_t i = 0; i < header.payload_bytes; ++i) {
    const uint8_t label = static_cast<uint8_t>(bytes[header.header_bytes + i]);
    if (label >= kNumClasses) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": label ", int{label}, " of example ", i,
                                              " is outside 0..", kNumClasses - 1));
    }
    dataset->labels[i] = label;
  }
  return absl::OkStatus();
}

// `base` when it exists, else `base`.gz; NotFound naming both otherwise.
absl::StatusOr<std::string> RawOrGzip(const std::string& base) {
  struct stat st;
  if (::stat(base.c_str(), &st) == 0) return base;
  const std::string gz = absl::StrCat(base, ".gz");
  if (::stat(gz.c_str(), &st) == 0) return gz;
  return absl::NotFoundError(absl::StrCat(base, ": no such file (nor ", gz,
                                          "); tools/fetch_mnist.sh downloads MNIST"));
}

}  // namespace

absl::StatusOr<Dataset> ParseIdx(std::string images, std::string labels,
                                 const std::string& images_name, const std::string& labels_name) {
  Dataset dataset;
  RETURN_IF_ERROR(ParseImages(images_name, std::move(images), &dataset));
  RETURN_IF_ERROR(ParseLabels(labels_name, std::move(labels), &dataset));
  if (static_cast<int64_t>(dataset.labels.size()) != dataset.size) {
    return absl::InvalidArgumentError(absl::StrCat(images_name, " holds ", dataset.size, " images but ",
                                            labels_name, " holds ", dataset.labels.size(),
                                            " labels"));
  }
  return dataset;
}

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path) {
  ASSIGN_OR_RETURN(std::string images, ReadWholeFile(images_path));
  ASSIGN_OR_RETURN(std::string labels, ReadWholeFile(labels_path));
  return ParseIdx(std::move(images), std::move(labels), images_path, labels_path);
}

absl::StatusOr<Dataset> LoadMnist(const std::string& data_dir, Split split) {
  const std::string prefix =
      absl::StrCat(data_dir, "/", split == Split::kTrain ? "train" : "t10k");
  ASSIGN_OR_RETURN(const std::string images, RawOrGzip(prefix + "-images-idx3-ubyte"));
  ASSIGN_OR_RETURN(const std::string labels, RawOrGzip(prefix + "-labels-idx1-ubyte"));
  return LoadIdx(images, labels);
}

Normalization NormalizationFor(const std::string& dataset) {
  if (dataset == "fashion_mnist") return {0.2860f, 0.3530f};
  return {};
}

void GatherBatch(const Dataset& dataset, absl::Span<const int64_t> indices,
                 const Normalization& norm, float* images, int32_t* labels) {
  // A table of the 256 possible values, each computed exactly as PyTorch's
  // ToTensor + Normalize do (p / 255, then - mean, then / std, in float).
  std::array<float, 256> table;
  for (int p = 0; p < 256; ++p) table[p] = (static_cast<float>(p) / 255.0f - norm.mean) / norm.std;
  const size_t image_size = static_cast<size_t>(dataset.rows) * dataset.cols;
  for (size_t b = 0; b < indices.size(); ++b) {
    const int64_t index = indices[b];
    CHECK(index >= 0 && index < dataset.size) << "index " << index << " of " << dataset.size;
    const auto* src = reinterpret_cast<const uint8_t*>(dataset.pixels.data()) +
                      static_cast<size_t>(index) * image_size;
    float* dst = images + b * image_size;
    for (size_t i = 0; i < image_size; ++i) dst[i] = table[src[i]];
    labels[b] = dataset.labels[static_cast<size_t>(index)];
  }
}

}  // namespace pstrain
