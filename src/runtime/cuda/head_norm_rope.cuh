// QK-norm and rotary embedding of one attention head vector, shared by the decode attention
// kernels (attention.cu) and the persistent decoder stack (decode_stack.cu), which must agree bit
// for bit.
#pragma once

#include "runtime/cuda/device_util.cuh"

namespace chorus::cuda::dev {

// One head vector (D values in `buf`, a warp's shared scratch): RMS-norm with `nw` when set, then
// rotary embedding at `pos`, written to dst (which may be buf). bf16: as nn::bf16::rms_norm and
// nn::bf16::rope (bf16 cos/sin, every product and sum rounded).
__device__ inline void norm_rope_head(float* buf, int D, const float* nw, float eps, const float* inv_freq, int pos,
                                      float* dst, bool bf16) {
  const int lane = threadIdx.x & 31;
  if (nw) {
    double ss = 0.0;
    for (int d = lane; d < D; d += 32) ss += static_cast<double>(buf[d]) * buf[d];
    ss = warp_sum(ss);
    __syncwarp();
    if (bf16) {
      const float inv = inv_rms_bf16(ss, D, eps);
      for (int d = lane; d < D; d += 32) buf[d] = norm_bf16(buf[d], inv, nw[d]);
    } else {
      const float inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + static_cast<double>(eps)));
      for (int d = lane; d < D; d += 32) buf[d] = __fmul_rn(__fmul_rn(buf[d], inv), nw[d]);
    }
    __syncwarp();
  }
  const int half = D / 2;
  const float fpos = static_cast<float>(pos);
  for (int i = lane; i < half; i += 32) {
    const float angle = __fmul_rn(fpos, inv_freq[i]);
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
