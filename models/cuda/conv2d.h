#pragma once

// 2-D convolution on the GPU with cuDNN, the same contract as
// models/cpu/conv2d.h: stride 1, no padding, a bias; PyTorch's
// nn.Conv2d(cin, cout, k).
//
//   x [n, cin, h, w], weight [cout, cin, k, k], bias [cout]
//     -> y [n, cout, h-k+1, w-k+1]                              (all NCHW)
//   y[i,o,p,q]  = b[o] + sum_{c,u,v} w[o,c,u,v] * x[i,c,p+u,q+v]
//   dw[o,c,u,v] = sum_{i,p,q} dy[i,o,p,q] * x[i,c,p+u,q+v]
//   db[o]       = sum_{i,p,q} dy[i,o,p,q]
//   dx[i,c,s,t] = sum_{o,u,v} dy[i,o,s-u,t-v] * w[o,c,u,v]   (terms in range)
//
// With cuDNN's legacy convolution API: cudnnConvolutionForward then
// cudnnAddTensor (the bias added after the sum, as on the CPU);
// backward as GEMMs of our own, a chunk of examples at a time
// (models/cuda/im2col.h): dw = rows * cols^T and dcols = w^T * rows, then a
// gather of dcols into dx (cuDNN's deterministic algorithms, BWD_FILTER_ALGO_1
// and BWD_DATA_ALGO_1, were the slowest part of the step at large batches on
// an H200, benchmarks/log/gpu.md), or cudnnConvolutionBackwardFilter and
// BackwardData when that scratch cannot be allocated; db is our own channel
// sum (models/cuda/channel_sum.h: cuDNN's BackwardBias was half the step at
// batch 4096). CUDNN_CROSS_CORRELATION (PyTorch's convolution does not flip
// the kernel), CUDNN_FMA_MATH and cuBLAS's pedantic math (no TF32).
//
// Algorithms are chosen once, in Create, for max_batch (the backward ones
// only when cuDNN runs backward), from cuDNN's
// heuristics (cudnnGetConvolution*Algorithm_v7: no benchmarking, so every run
// and every worker makes the same choice), by the policy of
// models/cuda/algorithm_search.h: in cuDNN's order, deterministic algorithms
// first, only the GEMM family (FFT and Winograd round through their
// transforms, well above a direct sum's error, which would break the 1e-5
// parity with the CPU) and no tensor-op ones, then the fallbacks (forward:
// IMPLICIT_PRECOMP_GEMM, IMPLICIT_GEMM; backward data and filter: ALGO_1,
// then the non-deterministic ALGO_0) whatever the heuristics said of them.
// The first whose workspace is at most kMaxWorkspaceBytes and can be
// allocated, and whose trial runs on zeroed scratch succeed with the
// pointers at every alignment a float pointer can have (4 to 256 bytes: a
// layer's parameters are a slice of the model's flat buffers), is chosen.
// A candidate that runs out of memory for its workspace, or fails a trial,
// is passed over for the next, and its workspace freed; the chosen one's
// becomes the context's shared workspace if it is the largest yet.
// A batch of another size reuses the algorithms; its workspace need is
// checked once per size (Internal if it were ever larger than what was
// reserved).
//
// Parameters in params() order: weight [cout, cin, k, k], then bias [cout].
// Every pointer passed to Forward and Backward needs only float alignment
// (4 bytes). The parameters and their gradients are used where they are
// (the algorithms were tried at each alignment a float can have). An
// activation cuDNN reads or writes (x and y forward; x, dy and dx when
// cuDNN runs backward) that does not start on cudaMalloc's 256-byte
// boundary is copied through the layer's own buffers, allocated on first
// use: on an H200 with cuDNN 9.19, activations at 4 bytes past a boundary
// made a chosen algorithm fault with cudaErrorMisalignedAddress, which is
// sticky (the process's CUDA context is lost), so it cannot be tried for in
// a trial either. Backward's GEMM path (our kernels and cuBLAS) takes them
// where they are. The model's activations are cudaMalloc'd and never copied.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/cuda/cuda_layer.h"
#include "models/cuda/cuda_resources.h"

namespace pstrain::models::cuda {

class Conv2d final : public CudaLayer {
 public:
  // The most workspace one algorithm of one pass may use.
  static constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;
  // The most scratch backward's GEMM path holds, in floats: its chunk of
  // examples is as large as fits (3,328 of mnist_cnn's conv1 examples).
  static constexpr int64_t kMaxGemmScratchFloats = int64_t{64} << 20;
  // The filter gradient's split-K (FilterGradient): from this many columns
  // up, in slices of at least kFilterSliceColumns, at most kMaxFilterSlices.
  static constexpr int kFilterSplitColumns = 1 << 18;
  static constexpr int kFilterSliceColumns = 4096;
  static constexpr int kMaxFilterSlices = 256;
  // The slices a sum over `columns` (>= kFilterSplitColumns) is cut into;
  // the partial sums hold one more row (their total).
  static constexpr int FilterSlices(int64_t columns) {
    return static_cast<int>(std::min<int64_t>(kMaxFilterSlices, columns / kFilterSliceColumns));
  }

  // Who computes backward: our GEMMs when their scratch can be allocated
  // (else cuDNN), or cuDNN's algorithms always (what a device short of
  // memory gets; tests run it on purpose).
  enum class BackwardPath { kGemmWhenItFits, kCudnn };

  // Internal when cuDNN offers no usable algorithm for a pass;
  // ResourceExhausted when the device is out of memory (for the layer's
  // scratch, or for the workspace of every candidate that could have run).
  // REQUIRES: out_channels >= 1, 1 <= kernel <= min(input.h, input.w),
  // max_batch >= 1; `context` outlives the layer.
  static absl::StatusOr<std::unique_ptr<Conv2d>> Create(
      CudaContext& context, std::string name, Shape input, int out_channels, int kernel,
      int max_batch, BackwardPath backward = BackwardPath::kGemmWhenItFits);

  std::vector<ParamSpec> params() const override;
  absl::Status Forward(const BatchContext& ctx, const float* params, const float* x,
                       float* y) override;
  absl::Status Backward(const BatchContext& ctx, const float* params, const float* x,
                        const float* y, const float* dy, float* dx, float* dparams) override;

  // "fwd=1 bwd_data=1 bwd_filter=1": cuDNN's enum values of the chosen
  // algorithms, for logs and benchmarks; "fwd=1 bwd=gemm" when backward is
  // ours.
  std::string algorithms() const;

 private:
  struct Scratch;
  class TrialWorkspace;

  Conv2d(CudaContext& context, std::string name, Shape input, int out_channels, int kernel,
         int max_batch);

  absl::Status CreateDescriptors();
  absl::Status ChooseAlgorithms();
  absl::Status ChooseForward(const Scratch& scratch, TrialWorkspace& workspace);
  absl::Status ChooseBackwardData(const Scratch& scratch, TrialWorkspace& workspace);
  absl::Status ChooseBackwardFilter(const Scratch& scratch, TrialWorkspace& workspace);
  // Sets the x and y descriptors to batch n and checks, once per n, that the
  // chosen algorithms' workspace fits the reserved one.
  absl::Status SetBatch(int n);
  // Queue one pass with `algo` on `workspace_bytes` of `workspace`.
  absl::Status RunForward(cudnnConvolutionFwdAlgo_t algo, const float* w, const float* x, float* y,
                          void* workspace, size_t workspace_bytes);
  absl::Status RunBackwardData(cudnnConvolutionBwdDataAlgo_t algo, const float* w, const float* dy,
                               float* dx, void* workspace, size_t workspace_bytes);
  absl::Status RunBackwardFilter(cudnnConvolutionBwdFilterAlgo_t algo, const float* x,
                                 const float* dy, float* dw, void* workspace,
                                 size_t workspace_bytes);

  // `p` itself when it starts on a 256-byte boundary, else the start of
  // `buffer` (allocated on first use for max_batch examples of `shape`)
  // holding a copy of `count` floats from p when `copy_in`.
  absl::StatusOr<float*> Aligned(const float* p, const Shape& shape, int64_t count, bool copy_in,
                                 DeviceArray<float>& buffer, const char* what);
  // Backward as cuBLAS GEMMs, gemm_chunk_ examples at a time
  // (models/cuda/im2col.h): dw = rows * cols^T, the chunks accumulated in
  // order, and, when dx is wanted, dcols = w^T * rows gathered into dx. Used
  // when its scratch could be allocated (else cuDNN's chosen algorithms are).
  absl::Status AllocateGemmScratch();
  absl::Status BackwardByGemm(int n, const float* w, const float* x, const float* dy, float* dw,
                              float* dx);
  // dw^T [K, cout] = cols^T rows over the first `columns` columns of
  // gemm_cols_ and gemm_rows_, written or (`accumulate`) added to dw. A
  // skinny product (K * cout sums of up to millions of terms) that one
  // cuBLAS GEMM ran on a handful of thread blocks (0.47 ms for mnist_cnn's
  // conv1 at batch 4096 on an H200); so, from kFilterSplitColumns columns
  // up, it is cut into equal column slices multiplied as one strided batch
  // into filter_partials_ (the few leftover columns as one more), then
  // summed in slice order: deterministic, no atomics. Below that the split
  // bought nothing measurable (conv2 at 4096) or cost time (batch 128).
  absl::Status FilterGradient(int columns, bool accumulate, float* dw);

  // Copies `count` floats from a staging buffer back to the caller's `p`
  // (nothing when they are the same).
  absl::Status CopyOut(const float* staged, float* p, int64_t count);

  int kernel_;
  int64_t weights_;  // cout * cin * k * k: the bias's offset in params
  // Staging for activations off a 256-byte boundary (see above).
  DeviceArray<float> staged_x_;   // x
  DeviceArray<float> staged_y_;   // y, or dy
  DeviceArray<float> staged_dx_;  // dx
  // BackwardByGemm's layouts for gemm_chunk_ examples at a time; none when
  // cuDNN's algorithms run backward.
  int gemm_chunk_ = 0;
  DeviceArray<float> gemm_cols_;  // [cin*k*k][chunk * oh*ow]: cols, then dcols
  DeviceArray<float> gemm_rows_;  // [cout][chunk * oh*ow]
  // [slices + 1][cin*k*k * cout] (FilterGradient); none when no chunk is
  // long enough to be split.
  DeviceArray<float> filter_partials_;
  // The bias gradient's per-slice sums (models/cuda/channel_sum.h).
  DeviceArray<float> bias_partials_;
  TensorDescriptor x_desc_;
  TensorDescriptor y_desc_;
  TensorDescriptor bias_desc_;
  FilterDescriptor w_desc_;
  ConvolutionDescriptor conv_desc_;
  int batch_ = 0;  // the n x_desc_ and y_desc_ are set and checked for
  cudnnConvolutionFwdAlgo_t fwd_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
};

}  // namespace pstrain::models::cuda
