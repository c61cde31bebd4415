#include "models/cuda/conv2d.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "models/net_spec.h"
#include "models/cuda/cuda_status.h"

namespace pstrain::models::cuda {
namespace {

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

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

// The heuristics' results worth trying, in cuDNN's order of expected speed
// with deterministic algorithms first (so runs repeat bit for bit), leaving
// out failures, tensor-op algorithms (TF32 on fp32 data) and transforms;
// then, should the heuristics not have listed them at all, `fallbacks`.
template <typename Perf>
std::vector<Perf> Rank(const Perf* perf, int count,
                       std::initializer_list<decltype(Perf::algo)> fallbacks) {
  std::vector<Perf> usable;
  for (int i = 0; i < count; ++i) {
    const cudnnMathType_t math = perf[i].mathType;
    if (perf[i].status != CUDNN_STATUS_SUCCESS || math == CUDNN_TENSOR_OP_MATH ||
        math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || !SumsProducts(perf[i].algo)) {
      continue;
    }
    usable.push_back(perf[i]);
  }
  std::stable_partition(usable.begin(), usable.end(),
                        [](const Perf& p) { return p.determinism == CUDNN_DETERMINISTIC; });
  for (const auto algo : fallbacks) {
    if (std::none_of(perf, perf + count, [&](const Perf& p) { return p.algo == algo; })) {
      Perf listed{};
      listed.algo = algo;
      usable.push_back(listed);
    }
  }
  return usable;
}

// The first of `ranked` whose workspace (size(algo, &bytes)) fits and whose
// trial (run(algo), with the workspace reserved) succeeds.
template <typename Perf, typename SizeFn, typename RunFn>
absl::StatusOr<decltype(Perf::algo)> Pick(CudaContext& context, const std::vector<Perf>& ranked,
                                          SizeFn size, RunFn run, absl::string_view what) {
  std::string tried;
  for (const Perf& perf : ranked) {
    size_t bytes = 0;
    if (size(perf.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    if (bytes > Conv2d::kMaxWorkspaceBytes) continue;
    RETURN_IF_ERROR(context.ReserveWorkspace(bytes));
    const absl::Status trial = run(perf.algo);
    if (trial.ok()) return perf.algo;
    absl::StrAppend(&tried, " [algo ", static_cast<int>(perf.algo), ": ", trial.message(), "]");
  }
  return absl::InternalError(absl::StrCat(what, ": cuDNN offers no usable algorithm (",
                                          ranked.size(), " fp32 GEMM-family candidates",
                                          tried.empty() ? "" : ":", tried, ")"));
}

}  // namespace

// Zeroed device buffers at max_batch for the algorithms' trial runs.
struct Conv2d::Scratch {
  DeviceArray<float> x, y, w;
};

absl::StatusOr<std::unique_ptr<Conv2d>> Conv2d::Create(CudaContext& context, std::string name,
                                                       Shape input, int out_channels, int kernel,
                                                       int max_batch) {
  std::unique_ptr<Conv2d> layer(
      new Conv2d(context, std::move(name), input, out_channels, kernel, max_batch));
  RETURN_IF_ERROR(context.Activate());
  RETURN_IF_ERROR(layer->CreateDescriptors());
  RETURN_IF_ERROR(layer->ChooseAlgorithms());
  VLOG(1) << layer->name() << ": cuDNN algorithms " << layer->algorithms() << ", workspace "
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
  ASSIGN_OR_RETURN(scratch.x,
                   DeviceArray<float>::Create(name() + ".trial_x", in.size() * max_batch()));
  ASSIGN_OR_RETURN(scratch.y,
                   DeviceArray<float>::Create(name() + ".trial_y", out.size() * max_batch()));
  ASSIGN_OR_RETURN(scratch.w, DeviceArray<float>::Create(name() + ".trial_w", weights_));
  for (const DeviceArray<float>* array : {&scratch.x, &scratch.y, &scratch.w}) {
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(array->data(), 0, array->bytes(), stream()));
  }
  RETURN_IF_ERROR(ChooseForward(scratch));
  RETURN_IF_ERROR(ChooseBackwardData(scratch));
  RETURN_IF_ERROR(ChooseBackwardFilter(scratch));
  batch_ = max_batch();
  return absl::OkStatus();
}

absl::Status Conv2d::ChooseForward(const Scratch& scratch) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(
      context().cudnn(), x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  const auto size = [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(context().cudnn(), x_desc_.get(), w_desc_.get(),
                                                   conv_desc_.get(), y_desc_.get(), algo, bytes);
  };
  const auto run = [&](cudnnConvolutionFwdAlgo_t algo) -> absl::Status {
    RETURN_IF_ERROR(RunForward(algo, scratch.w.data(), scratch.x.data(), scratch.y.data()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  };
  const auto ranked = Rank(
      perf, count,
      {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM});
  ASSIGN_OR_RETURN(fwd_algo_, Pick(context(), ranked, size, run, name() + " forward"));
  return absl::OkStatus();
}

absl::Status Conv2d::ChooseBackwardData(const Scratch& scratch) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      context().cudnn(), w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(),
      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
  const auto size = [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(context().cudnn(), w_desc_.get(),
                                                        y_desc_.get(), conv_desc_.get(),
                                                        x_desc_.get(), algo, bytes);
  };
  const auto run = [&](cudnnConvolutionBwdDataAlgo_t algo) -> absl::Status {
    RETURN_IF_ERROR(RunBackwardData(algo, scratch.w.data(), scratch.y.data(), scratch.x.data()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  };
  const auto ranked = Rank(perf, count, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1});
  ASSIGN_OR_RETURN(bwd_data_algo_, Pick(context(), ranked, size, run, name() + " backward data"));
  return absl::OkStatus();
}

absl::Status Conv2d::ChooseBackwardFilter(const Scratch& scratch) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int count = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      context().cudnn(), x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(),
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
  const auto size = [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(context().cudnn(), x_desc_.get(),
                                                          y_desc_.get(), conv_desc_.get(),
                                                          w_desc_.get(), algo, bytes);
  };
  const auto run = [&](cudnnConvolutionBwdFilterAlgo_t algo) -> absl::Status {
    RETURN_IF_ERROR(RunBackwardFilter(algo, scratch.x.data(), scratch.y.data(), scratch.w.data()));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
    return absl::OkStatus();
  };
  const auto ranked = Rank(perf, count, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1});
  ASSIGN_OR_RETURN(bwd_filter_algo_,
                   Pick(context(), ranked, size, run, name() + " backward filter"));
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
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
      handle, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(), bwd_data_algo_,
      &data));
  CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      handle, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(), bwd_filter_algo_,
      &filter));
  const size_t need = std::max({fwd, data, filter});
  if (need > context().workspace_bytes()) {
    return absl::InternalError(absl::StrCat(name(), ": batch of ", n, " needs ", need,
                                            " bytes of cuDNN workspace; ",
                                            context().workspace_bytes(), " were reserved"));
  }
  batch_ = n;
  return absl::OkStatus();
}

absl::Status Conv2d::Forward(const BatchContext& ctx, const float* params, const float* x,
                             float* y) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  RETURN_IF_ERROR(SetBatch(ctx.n));
  RETURN_IF_ERROR(RunForward(fwd_algo_, params, x, y));
  CUDNN_RETURN_IF_ERROR(cudnnAddTensor(context().cudnn(), &kOne, bias_desc_.get(),
                                       params + weights_, &kOne, y_desc_.get(), y));
  return absl::OkStatus();
}

absl::Status Conv2d::Backward(const BatchContext& ctx, const float* params, const float* x,
                              const float* y, const float* dy, float* dx, float* dparams) {
  RETURN_IF_ERROR(CheckBatch(ctx));
  RETURN_IF_ERROR(SetBatch(ctx.n));
  RETURN_IF_ERROR(RunBackwardFilter(bwd_filter_algo_, x, dy, dparams));
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardBias(context().cudnn(), &kOne, y_desc_.get(), dy,
                                                     &kZero, bias_desc_.get(), dparams + weights_));
  if (dx == nullptr) return absl::OkStatus();
  return RunBackwardData(bwd_data_algo_, params, dy, dx);
}

absl::Status Conv2d::RunForward(cudnnConvolutionFwdAlgo_t algo, const float* w, const float* x,
                                float* y) {
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
      context().cudnn(), &kOne, x_desc_.get(), x, w_desc_.get(), w, conv_desc_.get(), algo,
      context().workspace(), context().workspace_bytes(), &kZero, y_desc_.get(), y));
  return absl::OkStatus();
}

absl::Status Conv2d::RunBackwardData(cudnnConvolutionBwdDataAlgo_t algo, const float* w,
                                     const float* dy, float* dx) {
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
      context().cudnn(), &kOne, w_desc_.get(), w, y_desc_.get(), dy, conv_desc_.get(), algo,
      context().workspace(), context().workspace_bytes(), &kZero, x_desc_.get(), dx));
  return absl::OkStatus();
}

absl::Status Conv2d::RunBackwardFilter(cudnnConvolutionBwdFilterAlgo_t algo, const float* x,
                                       const float* dy, float* dw) {
  CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      context().cudnn(), &kOne, x_desc_.get(), x, y_desc_.get(), dy, conv_desc_.get(), algo,
      context().workspace(), context().workspace_bytes(), &kZero, w_desc_.get(), dw));
  return absl::OkStatus();
}

}  // namespace pstrain::models::cuda
