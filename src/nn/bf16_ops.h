// The ops of a Qwen3-style stack as a bf16 PyTorch run computes them (f32 arithmetic inside each op,
// the result stored as bf16): used by Qwen3Stack's bf16-activation mode (Breeze TTS 2 runs its
// backbone and depth decoder this way upstream). Every output value is a bf16 value held in f32.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace chorus::nn::bf16 {

void round(float* x, int64_t n);

// HF Qwen3RMSNorm under bf16: n = bf16(x · rsqrt(mean(x²) + eps)) in f32, y = bf16(w · n). y may alias x.
void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps);

// Rotate-half RoPE: cos/sin of the f32 angle pos · inv_freq stored as bf16, every product and sum
// rounded: x_i' = bf16(bf16(x_i·c) − bf16(x_{i+h}·s)), x_{i+h}' = bf16(bf16(x_{i+h}·c) + bf16(x_i·s)).
void rope(float* x, int64_t T, int64_t heads, int64_t head_dim, const int64_t* positions, const float* inv_freq);

// out = bf16(silu(gate)) · up, rounded (act_fn(gate) is a stored tensor).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// Causal grouped-query attention over a cache, as eager attention stores it: score
// bf16(bf16(q·k)·scale), probability bf16(softmax in f32), output bf16(Σ p·v). Same layout as
// cpu::attention (q [Tq, Hq, D], cache rows [Tk, Hkv, D], query t at position q_pos0 + t).
void attention(const float* q, int64_t Tq, int64_t Hq, const float* k, const float* v, int64_t Hkv, int64_t D,
               int64_t q_pos0, float scale, float* out, ThreadPool* pool);

}  // namespace chorus::nn::bf16
