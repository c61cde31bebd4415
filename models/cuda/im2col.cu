#include "models/cuda/im2col.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/cuda/cuda_status.h"
#include "models/cuda/launch.h"

namespace pstrain::models::cuda {
namespace {

// One thread per column of cols (one example's output position) and input
// channel c, walking that channel's k*k rows: a warp's threads take
// neighbouring columns, so every row's writes are coalesced (and its reads
// nearly so), and the divisions that find a column's example and position
// are done once per k*k elements, not once per element (one per element
// made this kernel the largest of a batch-4096 step on an H200:
// benchmarks/log/gpu.md). Per channel rather than per column, so a
// small batch still has threads enough (conv2 of mnist_cnn at batch 128:
// 82k). 32-bit index arithmetic (the caller keeps the count below 2^31).
__global__ void Im2ColKernel(const float* x, int cin, int h, int w, int kernel, int oh, int ow,
                             int examples, float* cols) {
  const unsigned int plane = oh * ow;
  const unsigned int width = examples * plane;  // columns
  const unsigned int total = cin * width;
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += gridDim.x * blockDim.x) {
    const unsigned int c = i / width, column = i % width;
    const unsigned int b = column / plane, p = column % plane;
    const unsigned int ph = p / ow, pw = p % ow;
    const float* window = x + ((static_cast<size_t>(b) * cin + c) * h + ph) * w + pw;
    float* to = cols + static_cast<size_t>(c) * kernel * kernel * width + column;
    for (int u = 0; u < kernel; ++u) {
      for (int v = 0; v < kernel; ++v) {
        *to = window[u * w + v];
        to += width;
      }
    }
  }
}

// One thread per element of dx (examples * cin * h * w, in its order).
__global__ void Col2ImKernel(const float* dcols, int cin, int h, int w, int kernel, int oh, int ow,
                             int examples, float* dx) {
  const unsigned int plane = oh * ow;
  const unsigned int width = examples * plane;
  const unsigned int total = examples * cin * h * w;
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += gridDim.x * blockDim.x) {
    const unsigned int t = i % w, s = (i / w) % h;
    const unsigned int c = (i / (w * h)) % cin, b = i / (w * h * cin);
    float sum = 0.0f;
    for (int u = 0; u < kernel; ++u) {
      const int ph = static_cast<int>(s) - u;
      if (ph < 0 || ph >= oh) continue;
      for (int v = 0; v < kernel; ++v) {
        const int pw = static_cast<int>(t) - v;
        if (pw < 0 || pw >= ow) continue;
        sum += dcols[static_cast<size_t>((c * kernel + u) * kernel + v) * width + b * plane +
                     ph * ow + pw];
      }
    }
    dx[i] = sum;
  }
}

// One thread per column (example b, position p), walking dy's channels
// (10 to 64 here), so a warp's writes of each row are coalesced and the
// divisions are done once per column.
__global__ void ChannelRowsKernel(const float* dy, int examples, int channels, unsigned int plane,
                                  float* rows) {
  const unsigned int width = examples * plane;
  for (unsigned int column = blockIdx.x * blockDim.x + threadIdx.x; column < width;
       column += gridDim.x * blockDim.x) {
    const unsigned int b = column / plane, p = column % plane;
    const float* from = dy + static_cast<size_t>(b) * channels * plane + p;
    for (int o = 0; o < channels; ++o) {
      rows[static_cast<size_t>(o) * width + column] = from[static_cast<size_t>(o) * plane];
    }
  }
}

__global__ void SumSlicesKernel(const float* partials, int slices, int64_t count, bool accumulate,
                                float* out) {
  PSTRAIN_GRID_STRIDE_LOOP(i, count) {
    float sum = accumulate ? out[i] : 0.0f;
    for (int s = 0; s < slices; ++s) sum += partials[s * count + i];
    out[i] = sum;
  }
}

// The columns of `examples` examples of a k x k kernel on `in` (stride 1,
// no padding): the output plane, and their element count.
struct Columns {
  int oh = 0, ow = 0;
  int64_t count = 0;
};

absl::Status CheckCount(int64_t count, const char* what) {
  if (count < 1 || count >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", count, " elements, not in [1, 2^31)"));
  }
  return absl::OkStatus();
}

// InvalidArgument when the kernel does not fit or the count is not below 2^31.
absl::StatusOr<Columns> ColumnsOf(const Shape& in, int kernel, int examples, const char* what) {
  Columns columns{in.h - kernel + 1, in.w - kernel + 1};
  if (kernel < 1 || columns.oh < 1 || columns.ow < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": kernel ", kernel, " on ", in.h, "x", in.w));
  }
  columns.count = int64_t{in.c} * kernel * kernel * examples * columns.oh * columns.ow;
  RETURN_IF_ERROR(CheckCount(columns.count, what));
  return columns;
}

}  // namespace

absl::Status LaunchIm2Col(const float* x, const Shape& in, int kernel, int examples, float* cols,
                          cudaStream_t stream) {
  ASSIGN_OR_RETURN(const Columns c, ColumnsOf(in, kernel, examples, "im2col"));
  return LaunchKernel("Im2ColKernel", [&] {
    Im2ColKernel<<<BlocksFor(int64_t{in.c} * examples * c.oh * c.ow), kThreadsPerBlock, 0,
                   stream>>>(x, in.c, in.h, in.w, kernel, c.oh, c.ow, examples, cols);
  });
}

absl::Status LaunchCol2Im(const float* dcols, const Shape& in, int kernel, int examples, float* dx,
                          cudaStream_t stream) {
  ASSIGN_OR_RETURN(const Columns c, ColumnsOf(in, kernel, examples, "col2im"));
  const int64_t count = in.size() * examples;
  RETURN_IF_ERROR(CheckCount(count, "col2im"));
  return LaunchKernel("Col2ImKernel", [&] {
    Col2ImKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(dcols, in.c, in.h, in.w, kernel,
                                                                    c.oh, c.ow, examples, dx);
  });
}

absl::Status LaunchChannelRows(const float* dy, int examples, int channels, int64_t plane,
                               float* rows, cudaStream_t stream) {
  const int64_t count = int64_t{channels} * examples * plane;
  RETURN_IF_ERROR(CheckCount(count, "channel rows"));
  return LaunchKernel("ChannelRowsKernel", [&] {
    ChannelRowsKernel<<<BlocksFor(examples * plane), kThreadsPerBlock, 0, stream>>>(
        dy, examples, channels, static_cast<unsigned int>(plane), rows);
  });
}

absl::Status LaunchSumSlices(const float* partials, int slices, int64_t count, bool accumulate,
                             float* out, cudaStream_t stream) {
  if (slices < 1 || count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sum of slices: ", slices, " slices of ", count, " elements"));
  }
  return LaunchKernel("SumSlicesKernel", [&] {
    SumSlicesKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream>>>(partials, slices, count,
                                                                       accumulate, out);
  });
}

}  // namespace pstrain::models::cuda
