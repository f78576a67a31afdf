// QK-norm and rotary embedding of one attention head vector, shared by the decode attention
// kernels (attention.cu) and the persistent decoder stack (decode_stack.cu), which must agree bit
// for bit.
#pragma once

#include "runtime/cuda/device_util.cuh"

namespace chorus::cuda::dev {

constexpr int kMaxHeadDim = 256;
constexpr int kHeadChunks = kMaxHeadDim / 32;  // a lane's dims d = lane + 32i

// What one warp's norm and rotation of a head vector need besides the vector: the norm weights of
// the lane's dims and the rotation's sines and cosines at `pos`. They depend on weights and the
// position only, so a kernel can form them before its PDL wait (the attention kernels do, at the
// position they read before it) and take them off the chain of round trips after it.
struct HeadRowConsts {
  float w[kHeadChunks];        // norm weights (0 past D, or without a norm)
  float f[kHeadChunks / 2];    // rotary frequencies of dims lane + 32i < D/2
  float s[kHeadChunks / 2], c[kHeadChunks / 2];
  int pos;
};

// The sines and cosines at `pos` (a position that differs from the one they were formed at).
__device__ inline void rotate_at(HeadRowConsts& hc, int D, int pos) {
  const int lane = threadIdx.x & 31;
  const float fpos = static_cast<float>(pos);
#pragma unroll
  for (int k = 0; k < kHeadChunks / 2; ++k)
    if (lane + 32 * k < D / 2) sincosf(__fmul_rn(fpos, hc.f[k]), &hc.s[k], &hc.c[k]);
  hc.pos = pos;
}

// Loads the norm weights `nw` (may be null) and the frequencies; the rotation is not formed yet.
__device__ inline HeadRowConsts head_row_loads(const float* nw, const float* inv_freq, int D) {
  const int lane = threadIdx.x & 31;
  HeadRowConsts hc;
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) {
    const int d = lane + 32 * i;
    hc.w[i] = nw && d < D ? nw[d] : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kHeadChunks / 2; ++k) {
    const int j = lane + 32 * k;
    hc.f[k] = j < D / 2 ? inv_freq[j] : 0.0f;
  }
  return hc;
}

// The constants with the rotation formed at `pos`.
__device__ inline HeadRowConsts head_row_consts(const float* nw, const float* inv_freq, int D, int pos) {
  HeadRowConsts hc = head_row_loads(nw, inv_freq, D);
  rotate_at(hc, D, pos);
  return hc;
}

// RMS-norm of one head vector (D ≤ kMaxHeadDim values in `buf`, a warp's shared scratch) in place
// with the weights hc.w; bf16: as nn::bf16::rms_norm.
__device__ inline void norm_head(float* buf, int D, const HeadRowConsts& hc, float eps, bool bf16) {
  const int lane = threadIdx.x & 31;
  double ss = 0.0;
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) {
    const int d = lane + 32 * i;
    if (d < D) ss += static_cast<double>(buf[d]) * buf[d];
  }
  ss = warp_sum(ss);
  __syncwarp();
  const float inv = bf16 ? inv_rms_bf16(ss, D, eps)
                         : static_cast<float>(1.0 / sqrt(ss / static_cast<double>(D) + static_cast<double>(eps)));
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) {
    const int d = lane + 32 * i;
    if (d < D) buf[d] = bf16 ? norm_bf16(buf[d], inv, hc.w[i]) : __fmul_rn(__fmul_rn(buf[d], inv), hc.w[i]);
  }
  __syncwarp();
}

// Rotary embedding of buf → dst (which may be buf); bf16: as nn::bf16::rope (bf16 cos/sin, every
// product and sum rounded). FORM: the sines and cosines formed here at `pos` as each pair needs
// them (fewer live registers), else hc's.
template <bool FORM>
__device__ inline void rope_head(const float* buf, int D, const HeadRowConsts& hc, int pos, float* dst, bool bf16) {
  const int lane = threadIdx.x & 31;
  const int half = D / 2;
  const float fpos = static_cast<float>(pos);
#pragma unroll
  for (int k = 0; k < kHeadChunks / 2; ++k) {
    const int i = lane + 32 * k;
    if (i >= half) break;
    float s, c;
    if constexpr (FORM) {
      sincosf(__fmul_rn(fpos, hc.f[k]), &s, &c);
    } else {
      s = hc.s[k];
      c = hc.c[k];
    }
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

// QK-norm (weights `nw`, null for none) and rotation at `pos` of buf → dst, the constants loaded
// here: their round trips overlap the sum of squares.
__device__ inline void norm_rope_head(float* buf, int D, const float* nw, float eps, const float* inv_freq, int pos,
                                      float* dst, bool bf16) {
  const HeadRowConsts hc = head_row_loads(nw, inv_freq, D);
  if (nw) norm_head(buf, D, hc, eps, bf16);
  rope_head<true>(buf, D, hc, pos, dst, bf16);
}

}  // namespace chorus::cuda::dev
