// CUDA kernels of the speech-codec decoder (models/codec/decoder_cuda.h): streaming causal
// convolutions, transposed convolutions, SnakeBeta, the decoder transformer's sliding-window
// attention over per-stream ring-buffer KV caches, a batch-invariant GEMM, and the small
// row/column ops around them. Everything is f32 (weights too), but for the bf16 columns and
// weights of gemm_bf16_operands, and asynchronous on the given stream; nothing synchronises with
// the host.
//
// Every kernel works on a batch of streams stepped together (codec_elements.h: stream b owns
// columns [b·steps, (b+1)·steps) of channels-first data and rows [b·n, (b+1)·n) of time-major
// data; its histories, ring and position come from device arrays indexed by b). A stream's values
// never depend on the other streams of the batch: each output element is computed by the same
// arithmetic whatever the batch. Streaming histories are double-buffered: a kernel reads the
// previous call's history from hist.in[b] and writes the next one to hist.out[b] (never the same
// buffer), so the history update needs no extra launch and no in-place hazard.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "runtime/cuda/codec_elements.h"

namespace chorus::cuda::codec_ops {

// The batch-invariant GEMM of codec_elements.h (GemmArgs, kGemmKChunk; 3xTF32 on tensor cores, or
// bf16 operands with `precision` kBf16):
// row-major C[M, N] = alpha·op(A)·op(B) + beta·C with leading dimensions as stored; trans_a: A is
// stored [K, M], trans_b: B is stored [N, K]. Any alignment of the pointers and leading dimensions
// (16-byte aligned ones are read faster). When the launch spreads K's chunks over several blocks
// the chunk sums go to `partial`, which must hold gemm_partial_floats(M, N, K) floats (a bound
// that never shrinks as M or N grow, so the largest shape's sizes every smaller one). (The kernel,
// the tile shape and the spread are chosen by size; they do not change any result.)
size_t gemm_partial_floats(int64_t M, int64_t N, int64_t K);
Status gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* partial, size_t partial_floats,
            cudaStream_t s, GemmPrecision precision = GemmPrecision::kF32);
// gemm on a given tile shape (kAuto: gemm's own choice by size), for tests that check that the
// kernels agree bit for bit; every path takes every shape. kLarge: 128 × 64 tiles; kSmall: 64 × 64;
// kThin8 / 16 / 32: 16 rows by 8, 16 or 32 columns; kThin: gemm's choice of those; kWide /
// kWide64: 128 or 64 rows by 128 (bf16 only: kInvalidArgument for f32). `group`: the
// K chunks per block (0: gemm's choice; at least the chunk count: every block adds all of them
// itself); a group short of the chunk count needs chunks·M·N floats of `partial`.
enum class GemmPath { kAuto, kLarge, kSmall, kThin, kThin8, kThin16, kThin32, kWide, kWide64 };
Status gemm_on_path(GemmPath path, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                    float* partial, size_t partial_floats, cudaStream_t s, int64_t group = 0,
                    GemmPrecision precision = GemmPrecision::kF32);

// gemm with bf16 operands already rounded and stored as bf16 bits (bf16_rn_bits): C = alpha·A·B +
// beta·C, A [M, K] (lda) and B [K, N] (ldb) neither transposed, on the wide tiles (path kAuto,
// kWide or kWide64; `group` as gemm_on_path's). The same bits as gemm(kBf16) on the f32 values
// they were rounded from, at half the bytes and without the rounding pass. K, N and the leading
// dimensions must be multiples of 8 and A and B 16-byte aligned (kInvalidArgument otherwise).
// gemm_takes_bf16_operands: whether a product of these sizes belongs there (gemm's bf16 policy
// picks a wide tile for it, and K and N are multiples of 8).
bool gemm_takes_bf16_operands(int64_t M, int64_t N, int64_t K);
Status gemm_bf16_operands(GemmPath path, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                          const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, float* partial,
                          size_t partial_floats, cudaStream_t s, int64_t group = 0);

// Batched streaming convolutions (codec_elements.h has the semantics and layouts): im2col of a
// causal stride-1 conv (its columns as f32, or as bf16 with Im2col::col16), a depthwise causal
// conv, the output stage of a transposed conv.
Status im2col_causal(const Im2col& a, cudaStream_t s);
Status depthwise_causal(const Depthwise& a, cudaStream_t s);
Status transposed_conv_output(const TconvOut& a, cudaStream_t s);

// A causal stride-1 conv to one output channel with bf16 products: y [streams·steps] gets the bits
// of im2col_causal(in) followed by gemm(kBf16) of w [1, cin·kernel] (f32, rounded to bf16 as gemm
// rounds it) by the columns (alpha 1, beta 0), and the streams' next histories are im2col's, but
// the columns are never written (in.col and in.col16 are unused). conv_to_one_fits: whether a
// block's window of the input fits its shared memory (kInvalidArgument otherwise).
struct ConvToOne {
  Im2col in;
  const float* w = nullptr;
  float* y = nullptr;
};
bool conv_to_one_fits(const Im2col& in);
Status conv_to_one_bf16(const ConvToOne& a, cudaStream_t s);

// The per-channel element-wise op of codec_elements.h (ChannelOp: bias, SnakeBeta, residual, clamp;
// f32 or bf16 out).
Status channel_op(const ChannelOp& op, cudaStream_t s);

// ---- decoder transformer and latent stages (time-major rows [T, C] unless stated) ---------------

// Split-RVQ codebook sums: sem[t] = Σ_{k < n_sem} table[k][codes[t, k]], ac[t] likewise over the
// other codebooks (added in ascending order as the CPU). tables [Q, codebook_size, dim].
Status rvq_sums(const int32_t* codes, int64_t n, int64_t quantizers, int64_t semantic, const float* tables,
                int64_t codebook_size, int64_t dim, float* sem, float* ac, cudaStream_t s);

// Rope of q and k (RopeStore in codec_elements.h): q into q_out, k with v into each stream's ring.
Status rope_store(const RopeStore& a, cudaStream_t s);
// Causal attention with a window over each stream's own ring: row i of stream b (position
// pos0[b] + i) sees that stream's keys at positions max(0, p − window + 1) .. p. q and out
// [streams·n, q_heads·head_dim]; f32 softmax, max-subtracted. Every ring must hold at least
// window − 1 + n rows (the caller checks; the capacities are on the device).
Status window_attention(const float* q, int64_t n, int64_t streams, int64_t q_heads, int64_t kv_heads,
                        int64_t head_dim, int64_t window, float scale, const StreamKv& kv, float* out, cudaStream_t s);

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
