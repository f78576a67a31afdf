// CPU kernels: the reference backend. Activations are f32, row-major and contiguous; weights may be
// f32, bf16 or f16 and are always accumulated in f32. Every kernel is tested against a naive
// double-precision reference (tests/runtime). Kernels take an optional ThreadPool (nullptr: run on
// the calling thread); results never depend on the number of threads (each output element is
// computed by exactly one thread, in a fixed order).
//
// Shapes are preconditions checked by the caller (the model loader validates every weight): a
// kernel given inconsistent sizes returns without writing rather than reading out of bounds where
// it can tell (e.g. weight.cols != K), but it cannot check buffer lengths.
//
// Layout conventions (PyTorch's):
//   linear weight  [N, K]            y = x · Wᵀ
//   sequence data  [T, C]            one row per position
//   conv data      [C, T]            channels first, as nn.Conv1d
//   conv1d weight  [Cout, Cin/groups, K]
//   convT weight   [Cin, Cout/groups, K]
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace chorus::cpu {

// A read-only [rows, cols] matrix in f32, bf16 or f16 (rows = output features for a linear layer).
struct MatrixRef {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  static MatrixRef of(const Tensor& t);  // rank-2 tensor (rank-1: a single row)
};

// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N] when bias != nullptr). y must not overlap x. Each
// element's reduction order is fixed, so a row's result is bitwise the same for any M.
void linear(const float* x, int64_t M, const MatrixRef& w, const float* bias, float* y,
            ThreadPool* pool = nullptr);

// out[i, :] = table[ids[i], :] as f32. Ids are checked by the caller.
void embedding(const MatrixRef& table, const int32_t* ids, int64_t n, float* out);

// y = x / sqrt(mean(x²) + eps) · weight, per row of length dim. y may alias x.
void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps);
// y = (x − mean) / sqrt(var + eps) · weight + bias, per row (biased variance). y may alias x.
void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                int64_t dim, float eps);

// Rotary embedding in place on x[T, heads, head_dim], "rotate half" layout (pairs i and
// i + head_dim/2), angle = positions[t] · inv_freq[i] for i < head_dim/2.
void rope(float* x, int64_t T, int64_t heads, int64_t head_dim, const int64_t* positions,
          const float* inv_freq);
// inv_freq[i] = 1 / theta^(2i/head_dim), with each step rounded to f32 as in PyTorch's formula
// (exponent 2i/head_dim in f32, the power correctly rounded, then the f32 reciprocal).
void rope_inv_freq(float theta, int64_t head_dim, float* inv_freq);

// Grouped-query attention of Tq new queries against a KV cache.
//   q   [Tq, Hq, D]; k, v: cache rows [Tk, Hkv, D] (row stride Hkv·D); out [Tq, Hq, D].
//   Query i sits at absolute position q_pos0 + i; key j sits at position j. Query i attends to
//   keys j with j <= q_pos0 + i and, when window > 0, j > q_pos0 + i − window.
//   Hq must be a multiple of Hkv (head h reads kv head h / (Hq/Hkv)). Keys at positions >= Tk do
//   not exist; a query with no visible key gets a zero output. Softmax is in f32, max-subtracted.
void attention(const float* q, int64_t Tq, int64_t Hq, const float* k, const float* v, int64_t Tk,
               int64_t Hkv, int64_t D, int64_t q_pos0, int64_t window, float scale, float* out,
               ThreadPool* pool = nullptr);

// out = silu(gate) · up, elementwise (SwiGLU).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void silu(float* x, int64_t n);
void gelu_erf(float* x, int64_t n);   // exact GELU (erf), as torch's default
void elu(float* x, int64_t n, float alpha = 1.0f);
void relu(float* x, int64_t n);
void tanh_inplace(float* x, int64_t n);
void sigmoid(float* x, int64_t n);
// SnakeBeta on one channel: y = x + inv_beta · sin²(alpha · x), y may alias x. sin² is a
// polynomial after reducing the argument by π (about 2 ulp) where |alpha·x| <= 8000, std::sin
// beyond. Vectorised per ISA with the same operations in the same order (no fused multiply-adds),
// so every ISA gives the same values.
void snake_beta(const float* x, int64_t n, float alpha, float inv_beta, float* y);

// Softmax of each row of length n, in place (max-subtracted). A row whose entries are all −inf
// becomes all zeros (no probability mass) instead of NaN.
void softmax(float* x, int64_t rows, int64_t n);

// 1-D convolution on x[Cin, T] (no implicit padding: pad the input yourself, e.g. causal left
// padding). y[Cout, Tout] with Tout = (T − dilation·(K−1) − 1) / stride + 1; y must not overlap x.
void conv1d(const float* x, int64_t Cin, int64_t T, const MatrixRef& weight /* [Cout, Cin/g·K] */,
            int64_t K, const float* bias, int64_t stride, int64_t dilation, int64_t groups, float* y,
            ThreadPool* pool = nullptr);
// Transposed 1-D convolution on x[Cin, T], no padding trimmed: y[Cout, (T−1)·stride + K].
void conv_transpose1d(const float* x, int64_t Cin, int64_t T,
                      const MatrixRef& weight /* [Cin, Cout/g·K] */, int64_t Cout, int64_t K,
                      const float* bias, int64_t stride, int64_t groups, float* y,
                      ThreadPool* pool = nullptr);

// Which implementation the matrix kernels (linear, attention, conv) use: "avx512+vnni", "avx512",
// "avx2+fma" or "portable". The fastest one the CPU supports is chosen at first use (AVX-512
// F/BW/VL/DQ with VNNI, without, else AVX2 + FMA + F16C, detected at run time). The environment
// variable CHORUS_CPU_ISA=portable|avx2|avx512|avx512vnni caps the choice (a cap above what the CPU
// has changes nothing).
//
// The AVX-512 kernels reproduce the AVX2 ones bit for bit on float weights (same per-element
// reduction order, both fused); only the quantised kernels (quant.h) differ between them. VNNI
// changes only int4 weights: their products take x quantised to int8 per group of 32.
const char* isa_name();
enum class Isa { kPortable, kAvx2, kAvx512, kAvx512Vnni };
Isa active_isa();
// Switches implementation (tests and benchmarks compare them in one process). Returns false and
// changes nothing when the CPU lacks the instructions. Not meant to race with running kernels.
bool set_isa(Isa isa);
// Optional instruction sets the quantised kernels can use on top of AVX-512 (run-time detected).
struct CpuFeatures {
  bool avx2 = false, avx512 = false, avx512_bf16 = false, avx512_vnni = false;
};
const CpuFeatures& cpu_features();

}  // namespace chorus::cpu
