// Codec-decoder kernels, part 1: streaming convolutions and SnakeBeta over a batch of streams
// (conv_ops.h). One thread per output element (the bodies are in codec_elements.h), but for im2col,
// whose blocks stage a window of their input first: the matrix products go through the GEMM
// (codec_gemm.cu), so the kernels here are memory-bound gathers and element-wise ops.
#include <string>

#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// im2col in windows (codec_elements.h): the window in shared memory, then every tap's row a
// shifted copy of it, so that SnakeBeta runs once per input value instead of once per tap and no
// element pays index divisions.
// PAIRS (im2col_pairs_fit): two steps a thread, so the block owns 2·blockDim.x steps.
template <bool PAIRS>
__global__ void im2col_window_kernel(Im2col a) {
  extern __shared__ float win[];
  const int64_t T = blockDim.x, per_block = PAIRS ? 2 * T : T, w = blockIdx.x, c = blockIdx.y, b = blockIdx.z;
  const int64_t span = im2col_window_span(a, w, per_block);
  for (int64_t p = threadIdx.x; p < span; p += T) win[p] = im2col_window_value(a, w, per_block, c, b, p);
  __syncthreads();
  if constexpr (PAIRS)
    im2col_window_store_pairs(a, w, T, c, b, threadIdx.x, win);
  else
    im2col_window_store(a, w, T, c, b, threadIdx.x, win);
}

__global__ void depthwise_kernel(Depthwise a, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) depthwise_element(a, i);
}

__global__ void transposed_output_kernel(TconvOut a, int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) tconv_element(a, i);
}

__global__ void channel_op_kernel(ChannelOp op) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < op.channels * op.steps) channel_element(op, i);
}

// One channel per blockIdx.y, four steps a thread: no index division, 16-byte accesses.
__global__ void channel_quad_kernel(ChannelOp op) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (t < op.steps) channel_quad(op, blockIdx.y, t);
}

Status launched(const char* what) { return check(cudaGetLastError(), what); }

// Launch sizes beyond one grid dimension (2^31 − 1 blocks) would be a bug of the caller's sizing.
Status check_size(int64_t total, const char* what) {
  if (total < 0 || (total + kThreads - 1) / kThreads > 0x7fffffffLL)
    return make_error(ErrorCode::kOutOfRange, std::string(what) + ": launch too large");
  return ok_status();
}

Status has_streams(const StreamHist& h, int64_t streams, int64_t history, const char* what) {
  if (streams < 1) return make_error(ErrorCode::kInvalidArgument, std::string(what) + ": no streams");
  if (history > 0 && (!h.in || !h.out))
    return make_error(ErrorCode::kInvalidArgument, std::string(what) + ": needs the streams' histories");
  return ok_status();
}

}  // namespace

Status im2col_causal(const Im2col& a, cudaStream_t s) {
  CHORUS_TRY(has_streams(a.hist, a.streams, conv_history(a.kernel, a.dilation), "im2col_causal"));
  if (a.kernel < 1 || a.dilation < 1 || a.steps < 0)
    return make_error(ErrorCode::kInvalidArgument, "im2col_causal: bad kernel, dilation or steps");
  if (a.cin < 1) return ok_status();
  const bool pairs = im2col_pairs_fit(a);
  const int64_t threads = im2col_window_threads(pairs ? a.steps / 2 : a.steps);
  const int64_t per_block = pairs ? 2 * threads : threads;
  const int64_t blocks = im2col_windows(a.steps, per_block);
  const size_t window = static_cast<size_t>(per_block + conv_history(a.kernel, a.dilation)) * sizeof(float);
  if (window > 48 * 1024 || a.cin > 65535 || a.streams > 65535 || blocks > 0x7fffffffLL)
    return make_error(ErrorCode::kOutOfRange, "im2col_causal: layer too large for the GPU kernel");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.cin), static_cast<unsigned>(a.streams));
  if (pairs)
    im2col_window_kernel<true><<<grid, static_cast<unsigned>(threads), window, s>>>(a);
  else
    im2col_window_kernel<false><<<grid, static_cast<unsigned>(threads), window, s>>>(a);
  return launched("im2col_causal");
}

Status depthwise_causal(const Depthwise& a, cudaStream_t s) {
  CHORUS_TRY(has_streams(a.hist, a.streams, conv_history(a.kernel, a.dilation), "depthwise_causal"));
  const int64_t total = depthwise_elements(a);
  CHORUS_TRY(check_size(total, "depthwise_causal"));
  if (total == 0) return ok_status();
  depthwise_kernel<<<blocks_for(total), kThreads, 0, s>>>(a, total);
  return launched("depthwise_causal");
}

Status transposed_conv_output(const TconvOut& a, cudaStream_t s) {
  if (a.kernel < a.stride || a.kernel > 2 * a.stride)
    return make_error(ErrorCode::kUnsupported, "transposed conv on the GPU needs stride <= kernel <= 2·stride");
  CHORUS_TRY(has_streams(a.hist, a.streams, tconv_overlaps(a) ? 1 : 0, "transposed_conv_output"));
  const int64_t total = tconv_elements(a);
  CHORUS_TRY(check_size(total, "transposed_conv_output"));
  if (total == 0) return ok_status();
  transposed_output_kernel<<<blocks_for(total), kThreads, 0, s>>>(a, total);
  return launched("transposed_conv_output");
}

Status channel_op(const ChannelOp& op, cudaStream_t s) {
  const int64_t total = op.channels * op.steps;
  if (total == 0) return ok_status();
  if (channel_quads_fit(op) && op.channels <= 65535) {
    const dim3 grid(blocks_for(op.steps / 4), static_cast<unsigned>(op.channels));
    channel_quad_kernel<<<grid, kThreads, 0, s>>>(op);
  } else {
    channel_op_kernel<<<blocks_for(total), kThreads, 0, s>>>(op);
  }
  return launched("channel_op");
}

}  // namespace chorus::cuda::codec_ops
