// QK-norm and rotary embedding of one attention head vector, shared by the decode attention
// kernels (attention.cu) and the persistent decoder stack (decode_stack.cu), which must agree bit
// for bit.
#pragma once

#include "runtime/cuda/device_util.cuh"

namespace chorus::cuda::dev {

constexpr int kMaxHeadDim = 256;

// One head vector (D ≤ kMaxHeadDim values in `buf`, a warp's shared scratch): RMS-norm with `nw`
// when set, then rotary embedding at `pos`, written to dst (which may be buf). bf16: as
// nn::bf16::rms_norm and nn::bf16::rope (bf16 cos/sin, every product and sum rounded). The norm
// weights and frequencies are loaded first, so their round trips overlap the sum of squares
// instead of following it.
__device__ inline void norm_rope_head(float* buf, int D, const float* nw, float eps, const float* inv_freq, int pos,
                                      float* dst, bool bf16) {
  constexpr int kChunks = kMaxHeadDim / 32;
  const int lane = threadIdx.x & 31;
  const int half = D / 2;
  float wv[kChunks], fv[kChunks / 2];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int d = lane + 32 * i;
    wv[i] = nw && d < D ? nw[d] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kChunks / 2; ++i) {
    const int j = lane + 32 * i;
    fv[i] = j < half ? inv_freq[j] : 0.0f;
  }
  if (nw) {
    double ss = 0.0;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int d = lane + 32 * i;
      if (d < D) ss += static_cast<double>(buf[d]) * buf[d];
    }
    ss = warp_sum(ss);
    __syncwarp();
    const float inv = bf16 ? inv_rms_bf16(ss, D, eps)
                           : static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + static_cast<double>(eps)));
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int d = lane + 32 * i;
      if (d < D) buf[d] = bf16 ? norm_bf16(buf[d], inv, wv[i]) : __fmul_rn(__fmul_rn(buf[d], inv), wv[i]);
    }
    __syncwarp();
  }
  const float fpos = static_cast<float>(pos);
#pragma unroll
  for (int k = 0; k < kChunks / 2; ++k) {
    const int i = lane + 32 * k;
    if (i >= half) break;
    const float angle = __fmul_rn(fpos, fv[k]);
    float s, c;
    sincosf(angle, &s, &c);
    const float a = buf[i], b = buf[i + half];
    if (bf16) {
      s = round_bf16(s);
      c = round_bf16(c);
      dst[i] = round_bf16(__fsub_rn(round_bf16(__fmul_rn(a, c)), round_bf16(__fmul_rn(b, s))));
      dst[i + half] = round_bf16(__fadd_rn(round_bf16(__fmul_rn(b, c)), round_bf16(__fmul_rn(a, s))));
    } else {
      dst[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      dst[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
  }
}

}  // namespace chorus::cuda::dev
