// A causal conv to one output channel with bf16 products (the vocoder's last conv, 96 channels ×
// 7 taps → the samples): conv_ops.h's conv_to_one_bf16. The general path writes im2col's columns
// (cin·kernel rows × every step, as f32) and multiplies them on a 16-row thin tile of which one
// row is used; here each block stages its window of the padded input once, as bf16, and the warps
// build the B fragments from it, so the columns are never written. Each output is one mma lane's
// value with the contract's k-steps of 16 and chunk sums (codec_elements.h), so the bits are the
// general path's.
#include <string>

#include "runtime/cuda/codec_gemm_device.cuh"
#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

using namespace gemm_kernels;

constexpr int kToOneThreads = 256;  // 8 warps
constexpr int kToOneSteps = 128;    // a block's steps of one stream: 16 column groups of 8

// The window's row length (padded input positions per channel), even so the weights that follow
// it start on 4 bytes.
__host__ __device__ inline int64_t to_one_span(const Im2col& in) {
  return (kToOneSteps + conv_history(in.kernel, in.dilation) + 1) / 2 * 2;
}
// k padded to whole k-steps of 16.
__host__ __device__ inline int64_t to_one_kpad(const Im2col& in) { return (in.cin * in.kernel + 15) / 16 * 16; }
// Shared bytes: the window [cin][span] and the weights [kpad] as bf16, each k's window offset.
size_t to_one_smem(const Im2col& in) {
  return static_cast<size_t>(in.cin * to_one_span(in) + to_one_kpad(in)) * sizeof(uint16_t) +
         static_cast<size_t>(to_one_kpad(in)) * sizeof(int32_t);
}

__device__ __forceinline__ uint32_t pair_bits(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
}

// Block (w, b): stream b's steps [w·128, w·128 + 128).
__global__ void __launch_bounds__(kToOneThreads) conv_to_one_kernel(ConvToOne a) {
  extern __shared__ __align__(16) unsigned char to_one_smem_bytes[];
  const Im2col& in = a.in;
  const int64_t H = conv_history(in.kernel, in.dilation), K = in.cin * in.kernel, kpad = to_one_kpad(in);
  const int64_t span = to_one_span(in), b = blockIdx.y, t0 = static_cast<int64_t>(blockIdx.x) * kToOneSteps;
  const int64_t left = in.steps - t0, own = left < kToOneSteps ? (left > 0 ? left : 0) : kToOneSteps;
  uint16_t* win = reinterpret_cast<uint16_t*>(to_one_smem_bytes);
  uint16_t* wk = win + in.cin * span;
  int32_t* off = reinterpret_cast<int32_t*>(wk + kpad);

  // The window: padded positions t0 .. t0 + own + H (SnakeBeta once per value, as im2col's window),
  // zeros past them.
  for (int64_t i = threadIdx.x; i < in.cin * span; i += blockDim.x) {
    const int64_t c = i / span, p = i % span;
    win[i] = p < own + H ? bf16_rn_bits(im2col_window_value(in, blockIdx.x, kToOneSteps, c, b, p)) : uint16_t{0};
  }
  for (int64_t k = threadIdx.x; k < kpad; k += blockDim.x) {
    wk[k] = k < K ? bf16_rn_bits(a.w[k]) : uint16_t{0};
    off[k] = k < K ? static_cast<int32_t>(k / in.kernel * span + k % in.kernel * in.dilation) : 0;
  }
  // The stream's last block writes the next history (f32, as im2col): padded positions steps ...
  if (H > 0 && t0 + kToOneSteps >= in.steps) {
    float* next = in.hist.out[b] + in.hist.offset;
    for (int64_t i = threadIdx.x; i < in.cin * H; i += blockDim.x) {
      const int64_t c = i / H, j = i % H;
      next[i] = im2col_window_value(in, blockIdx.x, kToOneSteps, c, b, in.steps - t0 + j);
    }
  }
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int64_t ksteps = kpad / 16, per_chunk = kGemmKChunk / 16;
  for (int group = warp; group * 8 < own; group += kToOneThreads / 32) {
    const int64_t col = group * 8 + g;  // this lane's column of B (step t0 + col)
    auto bval = [&](int64_t k) { return k < K ? win[off[k] + col] : uint16_t{0}; };
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t s = 0; s < ksteps; ++s) {
      const int64_t kb = s * 16 + 2 * t;
      // A: row 0 alone is the weights (mma16_a_at: registers 0 and 2 of lanes 0–3); rows 1–15 zero.
      const uint32_t a[4] = {g == 0 ? pair_bits(wk[kb], wk[kb + 1]) : 0u, 0u,
                             g == 0 ? pair_bits(wk[kb + 8], wk[kb + 9]) : 0u, 0u};
      const uint32_t bb[2] = {pair_bits(bval(kb), bval(kb + 1)), pair_bits(bval(kb + 8), bval(kb + 9))};
      mma_bf16(acc, a, bb);
      if ((s + 1) % per_chunk == 0 || s + 1 == ksteps) {
        for (int q = 0; q < 4; ++q) {
          sum[q] = gemm_add_chunk(sum[q], acc[q], s / per_chunk);
          acc[q] = 0.0f;
        }
      }
    }
    // C row 0 (mma_c_at: lanes 0–3, registers 0 and 1 at columns 2t and 2t + 1).
    if (g == 0)
      for (int q = 0; q < 2; ++q) {
        const int64_t c = group * 8 + 2 * t + q;
        if (c < own) a.y[b * in.steps + t0 + c] = sum[q];
      }
  }
}

}  // namespace

bool conv_to_one_fits(const Im2col& in) { return in.cin >= 1 && in.kernel >= 1 && to_one_smem(in) <= 48 * 1024; }

Status conv_to_one_bf16(const ConvToOne& a, cudaStream_t s) {
  const Im2col& in = a.in;
  if (in.streams < 1 || in.steps < 0 || in.kernel < 1 || in.dilation < 1 || !a.w || !a.y)
    return make_error(ErrorCode::kInvalidArgument, "conv_to_one_bf16: bad sizes or missing weights or output");
  if (conv_history(in.kernel, in.dilation) > 0 && (!in.hist.in || !in.hist.out))
    return make_error(ErrorCode::kInvalidArgument, "conv_to_one_bf16: needs the streams' histories");
  if (!conv_to_one_fits(in))
    return make_error(ErrorCode::kInvalidArgument, "conv_to_one_bf16: the window does not fit one block");
  const int64_t windows = in.steps < 1 ? 1 : (in.steps + kToOneSteps - 1) / kToOneSteps;
  if (windows > 0x7fffffffLL || in.streams > 65535)
    return make_error(ErrorCode::kOutOfRange, "conv_to_one_bf16: launch too large");
  const dim3 grid(static_cast<unsigned>(windows), static_cast<unsigned>(in.streams));
  conv_to_one_kernel<<<grid, kToOneThreads, to_one_smem(in), s>>>(a);
  return check(cudaGetLastError(), "conv_to_one_bf16");
}

}  // namespace chorus::cuda::codec_ops
