// CUDA kernels of the speech-codec decoder (models/codec/decoder_cuda.h): streaming causal
// convolutions, transposed convolutions, SnakeBeta, the decoder transformer's sliding-window
// attention over a ring-buffer KV cache, and the small row/column ops around them. Everything is
// f32 (weights too) and asynchronous on the given stream; nothing synchronises with the host.
//
// Layouts: "channels-first" [C, T] as nn.Conv1d (element (c, t) at c·T + t) unless a stride pair
// says otherwise. Streaming histories are double-buffered: a kernel reads the previous call's
// history from `hist_in` and writes the next one to `hist_out` (never the same buffer), so the
// history update needs no extra launch and no in-place hazard.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

typedef struct cublasContext* cublasHandle_t;

namespace chorus::cuda::codec_ops {

// Row-major single-precision GEMM through cuBLAS (no TF32: the handle must be in the default math
// mode): C[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C, with leading dimensions of the
// matrices as stored (row-major). trans_a: A is stored [K, M].
Status sgemm(cublasHandle_t h, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// SnakeBeta parameters per channel (exp already applied at load): y = x + inv_beta·sin²(alpha·x).
struct Snake {
  const float* alpha = nullptr;
  const float* inv_beta = nullptr;
};

// im2col of a causal, stride-1 convolution over [hist | x] (hist: [Cin, H] with H = (K−1)·dilation,
// x: element (c, t) at x[c·xcs + t·xts], t < n): col[(c·K + k)·n + t] = padded(c, t + k·dilation).
// When snake.alpha is set, SnakeBeta is applied to x first (the history already holds activated
// values). hist_out receives the last H columns of the (activated) padded input.
Status im2col_causal(const float* hist_in, float* hist_out, const float* x, int64_t xcs, int64_t xts,
                     int64_t cin, int64_t n, int64_t kernel, int64_t dilation, Snake snake, float* col,
                     cudaStream_t s);

// Depthwise causal conv (groups = channels): y[c, t] = bias[c] + Σ_k w[c, k]·padded(c, t + k·dil),
// with the history double-buffered as above. x, y channels-first [C, n].
Status depthwise_causal(const float* hist_in, float* hist_out, const float* x, int64_t channels, int64_t n,
                        const float* weight, const float* bias, int64_t kernel, int64_t dilation, float* y,
                        cudaStream_t s);

// Output of a causal transposed conv (kernel K <= 2·stride, so each output sample depends on at
// most the current and the previous input) from z = Wᵀ·x, z[(c·K + j)·n + t] the contribution of
// input t to output sample t·stride + j. y[c, t·stride + j] = bias[c] + z_prev + z_cur, in the CPU
// order (earlier input first); the previous call's last input column of z comes from zhist_in
// ([cout·K], zeros at the start) and this call's goes to zhist_out.
Status transposed_conv_output(const float* z, const float* zhist_in, float* zhist_out, int64_t cout, int64_t n,
                              int64_t kernel, int64_t stride, const float* bias, float* y, cudaStream_t s);

// Per-channel element-wise op on [C, T] data, x(c, t) at x[c·xcs + t·xts], y likewise:
//   v = x + bias[c] (when bias), then SnakeBeta (when snake.alpha), then v += residual (when set,
//   channels-first [C, T]), then clamp to [−1, 1] (when clamp; NaN stays NaN).
struct ChannelOp {
  const float* x = nullptr;
  int64_t xcs = 0, xts = 0;
  float* y = nullptr;
  int64_t ycs = 0, yts = 0;
  int64_t channels = 0, steps = 0;
  const float* bias = nullptr;
  Snake snake;
  const float* residual = nullptr;
  bool clamp = false;
};
Status channel_op(const ChannelOp& op, cudaStream_t s);

// ---- decoder transformer and latent stages (time-major rows [T, C] unless stated) ---------------

// Split-RVQ codebook sums: sem[t] = Σ_{k < n_sem} table[k][codes[t, k]], ac[t] likewise over the
// other codebooks (added in ascending order as the CPU). tables [Q, codebook_size, dim].
Status rvq_sums(const int32_t* codes, int64_t n, int64_t quantizers, int64_t semantic, const float* tables,
                int64_t codebook_size, int64_t dim, float* sem, float* ac, cudaStream_t s);

// Ring-buffer KV cache of one layer: position p lives in row p mod capacity of k and v
// ([capacity, kv_heads·head_dim]); capacity >= window − 1 + rows per call.
struct KvRing {
  float* k = nullptr;
  float* v = nullptr;
  int64_t capacity = 0;
};

// For rows at positions pos0 .. pos0 + n − 1 of qkv [n, (q_heads + 2·kv_heads)·head_dim]: q gets
// rope into q_out [n, q_heads·head_dim]; k gets rope and is stored with v into the ring.
Status rope_store(const float* qkv, int64_t n, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                  const float* inv_freq, int64_t pos0, KvRing kv, float* q_out, cudaStream_t s);
// Causal attention with a window: row i (position pos0 + i) sees keys at positions
// max(0, p − window + 1) .. p. out [n, q_heads·head_dim]; f32 softmax, max-subtracted.
Status window_attention(const float* q, int64_t n, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                        int64_t pos0, int64_t window, float scale, KvRing kv, float* out, cudaStream_t s);

// h[i, c] += scale[c] · x[i, c]
Status scaled_add(float* h, const float* x, const float* scale, int64_t rows, int64_t dim, cudaStream_t s);
// out[i, c] = silu(gu[i, c]) · gu[i, I + c] for rows of gu [n, 2I].
Status swiglu_rows(const float* gu, int64_t n, int64_t inter, float* out, cudaStream_t s);
// x[i, c] = gelu_erf(x[i, c] + bias[c]) in place.
Status bias_gelu_rows(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t s);
// LayerNorm over channels of channels-first x [C, T] (f64 statistics as cpu::layer_norm), written
// time-major: rows[t, c].
Status layer_norm_columns(const float* x, int64_t channels, int64_t steps, const float* weight, const float* bias,
                          float eps, float* rows, cudaStream_t s);
// y[c, t] = up[c, t] + gamma[c]·(pw[c, t] + bias[c]) (ConvNeXt residual, all channels-first).
Status convnext_residual(const float* up, const float* pw, const float* bias, const float* gamma, int64_t channels,
                         int64_t steps, float* y, cudaStream_t s);

}  // namespace chorus::cuda::codec_ops
