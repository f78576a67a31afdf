// CUDA kernels of a bidirectional Gemma-style encoder (the Breeze TTS 2 text encoder): scaled
// embeddings, RMS norms with optional bf16 rounding and residual add, RoPE per row position,
// tanh-GELU gating and non-causal attention with a symmetric window. Rows of several independent
// sequences are packed back to back; each row carries its position and its sequence's row range.
//
// `round_bf16` reproduces the CPU TextEncoder's bf16-activation mode (round to nearest even at the
// same points); without it every value stays f32. Launches are asynchronous on `s` and return a
// Status for launch errors, as ops.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

// Per packed row (device arrays): position in its sequence, first row and length of its sequence.
struct PackedRows {
  const int32_t* pos = nullptr;
  const int32_t* seq_start = nullptr;
  const int32_t* seq_len = nullptr;
  int64_t rows = 0;
};

// out[i] = table[ids[i]] · scale (rounded when round_bf16), except rows whose id is `special_id`,
// which take `special_row` (f32, [dim]) unscaled. Ids outside the table give zero rows.
Status scaled_embedding(const DeviceMatrix& table, const int32_t* ids, int64_t n, float scale, int32_t special_id,
                        const float* special_row, bool round_bf16, float* out, cudaStream_t s);

// y = rms_norm(x)·w per row (y may be x); rounded when round_bf16.
Status norm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps, bool round_bf16,
                 cudaStream_t s);
// residual += rms_norm(x)·w per row, the norm and the sum each rounded when round_bf16 (post-norm
// then residual add of a sandwich-norm block).
Status norm_add_rows(const float* x, const float* w, float* residual, int64_t rows, int64_t dim, float eps,
                     bool round_bf16, cudaStream_t s);
Status round_bf16_inplace(float* x, int64_t n, cudaStream_t s);

// Rotate-half RoPE of x [rows, heads, head_dim] at each row's position; round_bf16 rounds cos, sin
// and every product as a bf16 PyTorch run does.
Status rope_rows(float* x, int64_t heads, int64_t head_dim, PackedRows rows, const float* inv_freq, bool round_bf16,
                 cudaStream_t s);

// out = gelu_tanh(gate) · up (the activation rounded, then the product, when round_bf16).
Status gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n, bool round_bf16, cudaStream_t s);

// Non-causal attention within each row's sequence: query i sees key j iff 0 <= i - j < left or
// 0 < j - i < right (positions in the sequence); `full` ignores the window. q [rows, q_heads·hd],
// k and v [rows, kv_heads·hd], out like q. Sequences longer than kMaxAttentionKeys are refused.
inline constexpr int64_t kMaxAttentionKeys = 32768;
struct WindowAttention {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  HeadShape h;
  float scale = 1.0f;
  bool full = true;
  int32_t left = 0, right = 0;
  bool round_bf16 = false;
};
Status window_attention(const WindowAttention& a, PackedRows rows, int64_t longest_seq, cudaStream_t s);

}  // namespace chorus::cuda
