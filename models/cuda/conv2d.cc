#include "models/cuda/conv2d.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/net_spec.h"
#include "models/cuda/algorithm_search.h"
#include "models/cuda/channel_sum.h"
#include "models/cuda/im2col.h"
#include "models/cuda/cuda_status.h"

namespace pstrain::models::cuda {
namespace {

// Activations cuDNN is given start on cudaMalloc's boundary (conv2d.h).
constexpr uintptr_t kActivationAlignment = 256;

Shape ConvOutput(Shape in, int out_channels, int kernel) {
  return {out_channels, in.h - kernel + 1, in.w - kernel + 1};
}

// The algorithms that sum products, as the CPU's im2col + GEMM does, in
// some order: explicit or implicit GEMM. FFT and Winograd algorithms round
// through their transforms, with errors well above a direct sum's, and would
// break the 1e-5 parity with the CPU; at these layer sizes the GEMM
// algorithms are the fast ones anyway.
bool SumsProducts(cudnnConvolutionFwdAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
         algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
         algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}
bool SumsProducts(cudnnConvolutionBwdDataAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
bool SumsProducts(cudnnConvolutionBwdFilterAlgo_t algo) {
  return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
         algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// cuDNN's heuristics as RankAlgorithms takes them: usable when listed as
// working, in fp32 math (tensor-op algorithms would round through TF32) and
// summing products; then `fallbacks`.
template <typename Perf>
std::vector<int> Rank(const Perf* perf, int count,
                      std::initializer_list<decltype(Perf::algo)> fallbacks) {
  std::vector<ListedAlgorithm> listed;
  for (int i = 0; i < count; ++i) {
    const cudnnMathType_t math = perf[i].mathType;
    const bool fp32 = math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    listed.push_back({static_cast<int>(perf[i].algo),
                      perf[i].status == CUDNN_STATUS_SUCCESS && fp32 && SumsProducts(perf[i].algo),
                      perf[i].determinism == CUDNN_DETERMINISTIC});
  }
  std::vector<int> last_resort;
  for (const auto algo : fallbacks) last_resort.push_back(static_cast<int>(algo));
  return RankAlgorithms(listed, last_resort);
}

// Where a trial puts its pointers, in floats past cudaMalloc's 256-byte
// alignment: w and dw (`params`), x, y, dx and dy (`activations`).
struct TrialLayout {
  int params;
  int activations;
};

// Inside one algorithm cuDNN may pick kernels by the pointers' alignment,
// so an algorithm that ran on aligned scratch may refuse or fail on the
// model's pointers. There, a layer's parameters and gradients are a slice
// of the flat buffers starting at any float (aligned to 4, 8, ... or 256
// bytes: the layouts below); the activations cuDNN sees always start on a
// 256-byte boundary (Forward and Backward copy a caller's other pointers).
// No trial runs activations off that boundary: there an algorithm may
// fault with a sticky error (cudaErrorMisalignedAddress), which would end
// the context instead of rejecting the candidate.
constexpr TrialLayout kTrialLayouts[] = {{0, 0}, {1, 0}, {2, 0}, {4, 0}, {8, 0}, {16, 0}, {32, 0}};
constexpr int kMaxTrialOffset = 32;
constexpr int kTrialLayoutCount = sizeof(kTrialLayouts) / sizeof(kTrialLayouts[0]);

// Waits for a queued trial; its error names the layout it ran at.
absl::Status FinishTrial(cudaStream_t stream, absl::Status queued, int layout) {
  if (queued.ok()) {
    queued = CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize(trial)");
  }
  if (queued.ok()) return queued;
  const TrialLayout at = kTrialLayouts[layout];
  return absl::Status(queued.code(), absl::StrCat(queued.message(), " (trial with w at +",
                                                  at.params, " floats and x at +", at.activations,
                                                  " floats past a 256-byte boundary)"));
}

}  // namespace

// Zeroed device buffers at max_batch for the algorithms' trial runs, each
// kMaxTrialOffset floats longer, so that a trial may start it at any layout.
struct Conv2d::Scratch {
  DeviceArray<float> x, y, w;

  float* x_at(int layout) const { return x.data() + kTrialLayouts[layout].activations; }
  float* y_at(int layout) const { return y.data() + kTrialLayouts[layout].activations; }
  float* w_at(int layout) const { return w.data() + kTrialLayouts[layout].params; }
};

// The workspace of one candidate's trials: the shared one when that is
// large enough, else the candidate's own. That one is allocated while the
// shared one stays as it is, so running out of memory leaves the layers'
// workspace intact, and it is handed to the context only once the candidate
// is chosen, so a rejected candidate's workspace is freed, never kept.
class Conv2d::TrialWorkspace {
 public:
  explicit TrialWorkspace(CudaContext& context) : context_(context) {}

  // The search's workspace side and limits; each pass adds its
  // workspace_bytes and run.
  AlgorithmSearch Search() {
    AlgorithmSearch search;
    search.reserve = [this](size_t bytes) { return Reserve(bytes); };
    search.release = [this] { own_ = DeviceArray<char>(); };
    search.keep = [this] {
      if (own_.size() > 0) context_.AdoptWorkspace(std::move(own_));
    };
    search.layouts = kTrialLayoutCount;
    search.max_workspace_bytes = kMaxWorkspaceBytes;
    return search;
  }

  void* data() const { return own_.size() > 0 ? own_.data() : context_.workspace(); }
  size_t bytes() const { return own_.size() > 0 ? own_.bytes() : context_.workspace_bytes(); }

 private:
  absl::Status Reserve(size_t bytes) {
    own_ = DeviceArray<char>();
    if (bytes <= context_.workspace_bytes()) return absl::OkStatus();
    ASSIGN_OR_RETURN(own_,
                     DeviceArray<char>::Create("cudnn workspace", static_cast<int64_t>(bytes)));
    return absl::OkStatus();
  }

  CudaContext& context_;
  DeviceArray<char> own_;
};

absl::StatusOr<std::unique_ptr<Conv2d>> Conv2d::Create(CudaContext& context, std::string name,
                                                       Shape input, int out_channels, int kernel,
                                                       int max_batch, BackwardPath backward) {
  std::unique_ptr<Conv2d> layer(
      new Conv2d(context, std::move(name), input, out_channels, kernel, max_batch));
  RETURN_IF_ERROR(context.Activate());
  RETURN_IF_ERROR(layer->CreateDescriptors());
  if (backward == BackwardPath::kGemmWhenItFits) RETURN_IF_ERROR(layer->AllocateGemmScratch());
  ASSIGN_OR_RETURN(layer->bias_partials_,
                   DeviceArray<float>::Create(layer->name() + " bias partial sums",
                                              int64_t{out_channels} * kChannelSumSlices));
  RETURN_IF_ERROR(layer->ChooseAlgorithms());
  VLOG(1) << layer->name() << ": algorithms " << layer->algorithms() << ", cuDNN workspace "
          << context.workspace_bytes() << " bytes";
  return layer;
}

Conv2d::Conv2d(CudaContext& context, std::string name, Shape input, int out_channels, int kernel,
               int max_batch)
    : CudaLayer(context, std::move(name), input, ConvOutput(input, out_channels, kernel),
                max_batch),
      kernel_(kernel),
      weights_(int64_t{out_channels} * input.c * kernel * kernel) {
  CHECK(out_channels >= 1 && kernel >= 1 && kernel <= input.h && kernel <= input.w)
      << this->name() << ": conv " << kernel << "x" << kernel << " on " << input.h << "x"
      << input.w;
}

std::vector<ParamSpec> Conv2d::params() const {
  return Conv2dParams(name(), input_shape().c, output_shape().c, kernel_);
}

std::string Conv2d::algorithms() const {
  if (gemm_chunk_ > 0) return absl::StrCat("fwd=", static_cast<int>(fwd_algo_), " bwd=gemm");
  return absl::StrCat("fwd=", static_cast<int>(fwd_algo_),
                      " bwd_data=", static_cast<int>(bwd_data_algo_),
                      " bwd_filter=", static_cast<int>(bwd_filter_algo_));
}

absl::Status Conv2d::CreateDescriptors() {
  ASSIGN_OR_RETURN(x_desc_, CreateTensorDescriptor());
  ASSIGN_OR_RETURN(y_desc_, CreateTensorDescriptor());
  ASSIGN_OR_RETURN(bias_desc_, CreateTensorDescriptor());
  ASSIGN_OR_RETURN(w_desc_, CreateFilterDescriptor());
  ASSIGN_OR_RETURN(conv_desc_, CreateConvolutionDescriptor());
  const Shape in = input_shape(), out = output_shape();
  RETURN_IF_ERROR(SetTensor4d(bias_desc_.get(), 1, out.c, 1, 1));
  CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      w_desc_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, out.c, in.c, kernel_, kernel_));
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(conv_desc_.get(), /*pad=*/0, 0,
                                                        /*stride=*/1, 1, /*dilation=*/1, 1,
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv_desc_.get(), CUDNN_FMA_MATH));
  RETURN_IF_ERROR(SetTensor4d(x_desc_.get(), max_batch(), in.c, in.h, in.w));
  RETURN_IF_ERROR(SetTensor4d(y_desc_.get(), max_batch(), out.c, out.h, out.w));
  int n = 0, c = 0, h = 0, w = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), x_desc_.get(),
                                                              w_desc_.get(), &n, &c, &h, &w));
  if (n != max_batch() || c != out.c || h != out.h || w != out.w) {
    return absl::InternalError(absl::StrCat(name(), ": cuDNN's output [", n, ", ", c, ", ", h, ", ",
                                            w, "] differs from the layer's"));
  }
  return absl::OkStatus();
}

absl::Status Conv2d::ChooseAlgorithms() {
  const Shape in = input_shape(), out = output_shape();
  Scratch scratch;
  ASSIGN_OR_RETURN(scratch.x, DeviceArray<float>::Create(
                                  name() + ".trial_x", in.size() * max_batch() + kMaxTrialOffset));
  ASSIGN_OR_RETURN(scratch.y, DeviceArray<float>::Create(
                                  name() + ".trial_y", out.size() * max_batch() + kMaxTrialOffset));
  ASSIGN_OR_RETURN(scratch.w,
                   DeviceArray<float>::Create(name() + ".trial_w", weights_ + kMaxTrialOffset));
  for (const DeviceArray<float>* array : {&scratch.x, &scratch.y, &scratch.w}) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(array->data(), 0, array->bytes(), stream()));
  }
  TrialWorkspace workspace(context());
  RETURN_IF_ERROR(ChooseForward(scratch, workspace));
  if (gemm_chunk_ == 0) {  // else backward never calls cuDNN
    RETURN_IF_ERROR(ChooseBackwardData(scratch, workspace));
    RETURN_IF_ERROR(ChooseBackwardFilter(scratch, workspace));
  }
  batch_ = max_batch();
  return absl::OkStatus();
}

absl::Status Conv2d::ChooseForward(const Scratch& scratch, TrialWorkspace& workspace) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
      context().cudnn(), x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  AlgorithmSearch search = workspace.Search();
  search.workspace_bytes = [&](int algo) -> absl::StatusOr<size_t> {
    size_t bytes = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
        context().cudnn(), x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
        static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes));
    return bytes;
  };
  search.run = [&](int algo, int layout) {
    return FinishTrial(
        stream(),
        RunForward(static_cast<cudnnConvolutionFwdAlgo_t>(algo), scratch.w_at(layout),
                   scratch.x_at(layout), scratch.y_at(layout), workspace.data(), workspace.bytes()),
        layout);
  };
  const std::vector<int> ranked = Rank(
      perf, count,
      {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM});
  ASSIGN_OR_RETURN(const int algo, PickAlgorithm(ranked, search, name() + " forward"));
  fwd_algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
  return absl::OkStatus();
}

// ALGO_0 (atomics: not deterministic) is the last resort.
absl::Status Conv2d::ChooseBackwardData(const Scratch& scratch, TrialWorkspace& workspace) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      context().cudnn(), w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(),
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  AlgorithmSearch search = workspace.Search();
  search.workspace_bytes = [&](int algo) -> absl::StatusOr<size_t> {
    size_t bytes = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
        context().cudnn(), w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes));
    return bytes;
  };
  search.run = [&](int algo, int layout) {
    return FinishTrial(stream(),
                       RunBackwardData(static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                       scratch.w_at(layout), scratch.y_at(layout),
                                       scratch.x_at(layout), workspace.data(), workspace.bytes()),
                       layout);
  };
  const std::vector<int> ranked =
      Rank(perf, count, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0});
  ASSIGN_OR_RETURN(const int algo, PickAlgorithm(ranked, search, name() + " backward data"));
  bwd_data_algo_ = static_cast<cudnnConvolutionBwdDataAlgo_t>(algo);
  return absl::OkStatus();
}

// ALGO_0 (atomics: not deterministic) is the last resort.
absl::Status Conv2d::ChooseBackwardFilter(const Scratch& scratch, TrialWorkspace& workspace) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      context().cudnn(), x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(),
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  AlgorithmSearch search = workspace.Search();
  search.workspace_bytes = [&](int algo) -> absl::StatusOr<size_t> {
    size_t bytes = 0;
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        context().cudnn(), x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes));
    return bytes;
  };
  search.run = [&](int algo, int layout) {
    return FinishTrial(stream(),
                       RunBackwardFilter(static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                         scratch.x_at(layout), scratch.y_at(layout),
                                         scratch.w_at(layout), workspace.data(), workspace.bytes()),
                       layout);
  };
  const std::vector<int> ranked =
      Rank(perf, count, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0});
  ASSIGN_OR_RETURN(const int algo, PickAlgorithm(ranked, search, name() + " backward filter"));
  bwd_filter_algo_ = static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo);
  return absl::OkStatus();
}

absl::Status Conv2d::SetBatch(int n) {
  if (n == batch_) return absl::OkStatus();
  batch_ = 0;
  const Shape in = input_shape(), out = output_shape();
  RETURN_IF_ERROR(SetTensor4d(x_desc_.get(), n, in.c, in.h, in.w));
  RETURN_IF_ERROR(SetTensor4d(y_desc_.get(), n, out.c, out.h, out.w));
  cudnnHandle_t handle = context().cudnn();
  size_t fwd = 0, data = 0, filter = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
      handle, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(), fwd_algo_, &fwd));
  if (gemm_chunk_ == 0) {
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
        handle, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(), bwd_data_algo_,
        &data));
    CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(), bwd_filter_algo_,
        &filter));
  }
  const size_t need = std::max({fwd, data, filter});
  if (need > context().workspace_bytes()) {
    return absl::InternalError(absl::StrCat(name(), ": batch of ", n, " needs ", need,
                                            " bytes of cuDNN workspace; ",
                                            context().workspace_bytes(), " were reserved"));
  }
  batch_ = n;
  return absl::OkStatus();
}

absl::StatusOr<float*> Conv2d::Aligned(const float* p, const Shape& shape, int64_t count,
                                       bool copy_in, DeviceArray<float>& buffer, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % kActivationAlignment == 0) return const_cast<float*>(p);
  if (buffer.size() == 0) {
    ASSIGN_OR_RETURN(buffer, DeviceArray<float>::Create(absl::StrCat(name(), ".staged_", what),
                                                        shape.size() * max_batch()));
  }
  if (copy_in) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buffer.data(), p, sizeof(float) * count,
                                         cudaMemcpyDeviceToDevice, stream()));
  }
  return buffer.data();
}

absl::Status Conv2d::CopyOut(const float* staged, float* p, int64_t count) {
  if (staged == p) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(p, staged, sizeof(float) * count, cudaMemcpyDeviceToDevice, stream()));
  return absl::OkStatus();
}

absl::Status Conv2d::Forward(const BatchContext& ctx, const float* params, const float* x,
                             float* y) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  RETURN_IF_ERROR(SetBatch(ctx.n));
  const int64_t x_count = input_shape().size() * ctx.n, y_count = output_shape().size() * ctx.n;
  ASSIGN_OR_RETURN(const float* xs,
                   Aligned(x, input_shape(), x_count, /*copy_in=*/true, staged_x_, "x"));
  ASSIGN_OR_RETURN(float* ys,
                   Aligned(y, output_shape(), y_count, /*copy_in=*/false, staged_y_, "y"));
  RETURN_IF_ERROR(
      RunForward(fwd_algo_, params, xs, ys, context().workspace(), context().workspace_bytes()));
  CUDNN_RETURN_IF_ERROR(cudnnAddTensor(context().cudnn(), &kOne, bias_desc_.get(),
                                       params + weights_, &kOne, y_desc_.get(), ys));
  return CopyOut(ys, y, y_count);
}

absl::Status Conv2d::Backward(const BatchContext& ctx, const float* params, const float* x,
                              const float* y, const float* dy, float* dx, float* dparams) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  RETURN_IF_ERROR(SetBatch(ctx.n));
  // The bias gradient, and backward's GEMM path, are our kernels and
  // cuBLAS, which take x, dy and dx at any float's alignment; only cuDNN's
  // algorithms get staged copies.
  const Shape out = output_shape();
  RETURN_IF_ERROR(LaunchChannelSum(dy, ctx.n, out.c, int64_t{out.h} * out.w, bias_partials_.data(),
                                   dparams + weights_, stream()));
  if (gemm_chunk_ > 0) return BackwardByGemm(ctx.n, params, x, dy, dparams, dx);
  const int64_t x_count = input_shape().size() * ctx.n, y_count = output_shape().size() * ctx.n;
  ASSIGN_OR_RETURN(const float* xs,
                   Aligned(x, input_shape(), x_count, /*copy_in=*/true, staged_x_, "x"));
  ASSIGN_OR_RETURN(const float* dys,
                   Aligned(dy, output_shape(), y_count, /*copy_in=*/true, staged_y_, "y"));
  RETURN_IF_ERROR(RunBackwardFilter(bwd_filter_algo_, xs, dys, dparams, context().workspace(),
                                    context().workspace_bytes()));
  if (dx == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(float* dxs,
                   Aligned(dx, input_shape(), x_count, /*copy_in=*/false, staged_dx_, "dx"));
  RETURN_IF_ERROR(RunBackwardData(bwd_data_algo_, params, dys, dxs, context().workspace(),
                                  context().workspace_bytes()));
  return CopyOut(dxs, dx, x_count);
}

absl::Status Conv2d::AllocateGemmScratch() {
  const Shape in = input_shape(), out = output_shape();
  const int64_t plane = int64_t{out.h} * out.w;
  const int64_t per_example = (int64_t{in.c} * kernel_ * kernel_ + out.c) * plane;
  const int chunk = static_cast<int>(
      std::clamp<int64_t>(kMaxGemmScratchFloats / per_example, 1, max_batch()));
  absl::StatusOr<DeviceArray<float>> cols = DeviceArray<float>::Create(
      name() + ".gemm_cols", int64_t{in.c} * kernel_ * kernel_ * chunk * plane);
  absl::StatusOr<DeviceArray<float>> rows =
      DeviceArray<float>::Create(name() + ".gemm_rows", int64_t{out.c} * chunk * plane);
  if (!cols.ok() || !rows.ok()) {
    const absl::Status error = cols.ok() ? rows.status() : cols.status();
    if (error.code() != absl::StatusCode::kResourceExhausted) return error;
    LOG(WARNING) << name() << ": no memory for backward's GEMM scratch; cuDNN's algorithms "
                 << "run it";
    return absl::OkStatus();
  }
  gemm_cols_ = std::move(cols).value();
  gemm_rows_ = std::move(rows).value();
  gemm_chunk_ = chunk;
  // The split-K's partial sums, when a chunk is long enough to be split
  // (FilterGradient); without the memory the filter gradient is one GEMM.
  const int64_t columns = chunk * plane;
  if (columns < kFilterSplitColumns) return absl::OkStatus();
  absl::StatusOr<DeviceArray<float>> partials = DeviceArray<float>::Create(
      name() + ".filter_partials", int64_t{FilterSlices(columns) + 1} * weights_);
  if (partials.ok()) {
    filter_partials_ = std::move(partials).value();
  } else if (partials.status().code() == absl::StatusCode::kResourceExhausted) {
    LOG(WARNING) << name() << ": no memory for the filter gradient's partial sums; one GEMM "
                 << "computes it";
  } else {
    return partials.status();
  }
  return absl::OkStatus();
}

// Column-major, with K = cin*k*k and C = a chunk's examples * oh*ow columns:
//   dw^T [K, cout]  = cols^T rows        (the first chunk writes dw, beta 0;
//                                         later ones add to it in order)
//   dcols^T [C, K]  = rows^T w^T         (into gemm_cols_, once dw is done)
// so every sum's order depends only on n.
absl::Status Conv2d::BackwardByGemm(int n, const float* w, const float* x, const float* dy,
                                    float* dw, float* dx) {
  const Shape in = input_shape(), out = output_shape();
  const int64_t plane = int64_t{out.h} * out.w;
  const int k = in.c * kernel_ * kernel_;
  cublasHandle_t cublas = context().cublas();
  for (int first = 0; first < n; first += gemm_chunk_) {
    const int examples = std::min(gemm_chunk_, n - first);
    const int columns = static_cast<int>(examples * plane);
    RETURN_IF_ERROR(
        LaunchIm2Col(x + first * in.size(), in, kernel_, examples, gemm_cols_.data(), stream()));
    RETURN_IF_ERROR(LaunchChannelRows(dy + first * out.size(), examples, out.c, plane,
                                      gemm_rows_.data(), stream()));
    RETURN_IF_ERROR(FilterGradient(columns, /*accumulate=*/first > 0, dw));
    if (dx == nullptr) continue;
    CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_T, columns, k, out.c, &kOne,
                                       gemm_rows_.data(), columns, w, k, &kZero, gemm_cols_.data(),
                                       columns));
    RETURN_IF_ERROR(LaunchCol2Im(gemm_cols_.data(), in, kernel_, examples,
                                 dx + first * in.size(), stream()));
  }
  return absl::OkStatus();
}

absl::Status Conv2d::FilterGradient(int columns, bool accumulate, float* dw) {
  const int k = input_shape().c * kernel_ * kernel_, cout = output_shape().c;
  cublasHandle_t cublas = context().cublas();
  const float* cols = gemm_cols_.data();
  const float* rows = gemm_rows_.data();
  if (columns < kFilterSplitColumns || filter_partials_.size() == 0) {
    CUBLAS_RETURN_IF_ERROR(cublasSgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, cout, columns, &kOne,
                                       cols, columns, rows, columns, accumulate ? &kOne : &kZero,
                                       dw, k));
    return absl::OkStatus();
  }
  const int slices = FilterSlices(columns);
  const int length = columns / slices;
  const int64_t count = weights_;  // k * cout
  float* partials = filter_partials_.data();
  CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(
      cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, cout, length, &kOne, cols, columns, length, rows,
      columns, length, &kZero, partials, k, count, slices));
  int used = slices;
  if (const int64_t done = int64_t{slices} * length; done < columns) {
    CUBLAS_RETURN_IF_ERROR(cublasSgemm(
        cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, cout, static_cast<int>(columns - done), &kOne,
        cols + done, columns, rows + done, columns, &kZero, partials + used * count, k));
    ++used;
  }
  return LaunchSumSlices(partials, used, count, accumulate, dw, stream());
}

absl::Status Conv2d::RunForward(cudnnConvolutionFwdAlgo_t algo, const float* w, const float* x,
                                float* y, void* workspace, size_t workspace_bytes) {
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(context().cudnn(), &kOne, x_desc_.get(), x,
                                                w_desc_.get(), w, conv_desc_.get(), algo, workspace,
                                                workspace_bytes, &kZero, y_desc_.get(), y));
  return absl::OkStatus();
}

absl::Status Conv2d::RunBackwardData(cudnnConvolutionBwdDataAlgo_t algo, const float* w,
                                     const float* dy, float* dx, void* workspace,
                                     size_t workspace_bytes) {
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
      context().cudnn(), &kOne, w_desc_.get(), w, y_desc_.get(), dy, conv_desc_.get(), algo,
      workspace, workspace_bytes, &kZero, x_desc_.get(), dx));
  return absl::OkStatus();
}

absl::Status Conv2d::RunBackwardFilter(cudnnConvolutionBwdFilterAlgo_t algo, const float* x,
                                       const float* dy, float* dw, void* workspace,
                                       size_t workspace_bytes) {
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      context().cudnn(), &kOne, x_desc_.get(), x, y_desc_.get(), dy, conv_desc_.get(), algo,
      workspace, workspace_bytes, &kZero, w_desc_.get(), dw));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda
