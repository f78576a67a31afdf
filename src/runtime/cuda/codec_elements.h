// Per-element bodies of the codec decoder's batched kernels (conv_ops.h), written once for the
// device and the host: each CUDA kernel runs one of these per thread, and the CPU tests
// (tests/runtime/codec_stream_kernels_test.cpp, codec_gemm_emulation_test.cpp) run the same
// functions in loops, so the stream / column / history indexing and the GEMM's chunking are
// checked on machines without a GPU (the GEMM's tiles: codec_gemm_tiles.h). No CUDA header here:
// plain C++ sees the functions as ordinary inline functions.
//
// A batch is `streams` streams stepped together, each by the same number of columns `steps`: in
// every channels-first activation [C, streams·steps] stream b owns columns [b·steps, (b+1)·steps),
// and in every time-major one [streams·n, C] rows [b·n, (b+1)·n). What differs per stream (its
// histories, its attention ring, its position) is reached through device arrays indexed by b.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__ __forceinline__
#define CHORUS_UNROLL _Pragma("unroll")
#define CHORUS_NO_UNROLL _Pragma("unroll 1")
#else
#define CHORUS_HD inline
#define CHORUS_UNROLL
#define CHORUS_NO_UNROLL
#endif

namespace chorus::cuda::codec_ops {

// Rounded f32 multiply, add and subtract that the device compiler never fuses into an FMA, so a
// value is the same whichever kernel computes it (the host compiler does not contract in ISO C++
// mode).
CHORUS_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CHORUS_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// SnakeBeta parameters per channel (exp already applied at load): y = x + inv_beta·sin²(alpha·x).
struct Snake {
  const float* alpha = nullptr;
  const float* inv_beta = nullptr;
};

CHORUS_HD float snake_at(float v, float alpha, float inv_beta) {
  const float s = sinf(v * alpha);
  return v + inv_beta * (s * s);
}

// The streaming histories of one layer for every stream of a batch: stream b reads
// in[b] + offset and writes out[b] + offset (its two history buffers, never the same one).
struct StreamHist {
  const float* const* in = nullptr;
  float* const* out = nullptr;
  int64_t offset = 0;
};

// x rounded to bf16 (nearest, ties to even: cvt.rn.bf16.f32 on the device), as its bit pattern.
CHORUS_HD uint16_t bf16_rn_bits(float x) {
#if defined(__CUDA_ARCH__)
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
#else
  return ::chorus::f32_to_bf16(x);
#endif
}
// Two values as bf16 in one little-endian 32-bit word: `lo` at the lower address.
CHORUS_HD uint32_t bf16_pair_bits(float lo, float hi) {
  return bf16_rn_bits(lo) | static_cast<uint32_t>(bf16_rn_bits(hi)) << 16;
}

// ---- im2col of a causal, stride-1 convolution ---------------------------------------------------
// Per stream b: padded_b = [hist_b | act(x_b)] with hist_b [cin, H], H = (kernel − 1)·dilation, and
// x_b element (c, t) at x[c·xcs + (b·steps + t)·xts]. col [cin·kernel, streams·steps]:
// col[(c·K + k)·N + b·steps + t] = padded_b(c, t + k·dilation); the stream's next history is the
// last H columns of padded_b. SnakeBeta on x when snake.alpha (histories hold activated values).
struct Im2col {
  StreamHist hist;
  const float* x = nullptr;
  int64_t xcs = 0, xts = 0;
  int64_t cin = 0, steps = 0, streams = 0, kernel = 1, dilation = 1;
  Snake snake;
  float* col = nullptr;
  uint16_t* col16 = nullptr;  // when set, the columns go here as bf16 (bf16_rn_bits), not to col
};

CHORUS_HD int64_t conv_history(int64_t kernel, int64_t dilation) { return (kernel - 1) * dilation; }

// Column j of stream b's padded input, channel c.
CHORUS_HD float padded_at(const float* hist, const float* x, int64_t xcs, int64_t xts, int64_t H, int64_t first_col,
                          int64_t c, int64_t j, Snake sn) {
  if (j < H) return hist[c * H + j];
  const float v = x[c * xcs + (first_col + j - H) * xts];
  return sn.alpha ? snake_at(v, sn.alpha[c], sn.inv_beta[c]) : v;
}

// im2col in windows, as conv.cu launches it: block (w, c, b) of `threads` threads owns channel c of
// stream b at steps [t0, t0 + threads), t0 = w·threads. It first stages its window of the stream's
// padded input, padded positions [t0, t0 + own + H) (SnakeBeta applied once per value), then each
// thread writes its step's kernel taps, each a shifted read of the window, and the stream's last
// block writes the next history (padded positions [steps, steps + H)). A stream with no steps still
// has one block, which moves its history.
CHORUS_HD int64_t im2col_window_threads(int64_t steps) {
  return steps >= 256 ? 256 : (steps < 1 ? 32 : (steps + 31) / 32 * 32);
}
CHORUS_HD int64_t im2col_windows(int64_t steps, int64_t threads) {
  return steps < 1 ? 1 : (steps + threads - 1) / threads;
}
// The steps block w owns, and its window's length.
CHORUS_HD int64_t im2col_window_own(const Im2col& a, int64_t w, int64_t threads) {
  const int64_t left = a.steps - w * threads;
  return left < threads ? (left > 0 ? left : 0) : threads;
}
CHORUS_HD int64_t im2col_window_span(const Im2col& a, int64_t w, int64_t threads) {
  return im2col_window_own(a, w, threads) + conv_history(a.kernel, a.dilation);
}
// Window value p (p < im2col_window_span) of block (w, c, b).
CHORUS_HD float im2col_window_value(const Im2col& a, int64_t w, int64_t threads, int64_t c, int64_t b, int64_t p) {
  const int64_t H = conv_history(a.kernel, a.dilation);
  const float* hist = H > 0 ? a.hist.in[b] + a.hist.offset : nullptr;
  return padded_at(hist, a.x, a.xcs, a.xts, H, b * a.steps, c, w * threads + p, a.snake);
}
// The stream's last block (its steps from t0, per_block of them, end the stream's) writes the next
// history from its window, thread tid of `threads` every threads-th value.
CHORUS_HD void im2col_window_history(const Im2col& a, int64_t t0, int64_t per_block, int64_t threads, int64_t c,
                                     int64_t b, int64_t tid, const float* win) {
  const int64_t H = conv_history(a.kernel, a.dilation);
  if (H == 0 || t0 + per_block < a.steps) return;
  float* next = a.hist.out[b] + a.hist.offset + c * H;
  for (int64_t j = tid; j < H; j += threads) next[j] = win[a.steps - t0 + j];
}

// Thread tid's writes of block (w, c, b) from its staged window.
CHORUS_HD void im2col_window_store(const Im2col& a, int64_t w, int64_t threads, int64_t c, int64_t b, int64_t tid,
                                   const float* win) {
  const int64_t t0 = w * threads, N = a.streams * a.steps;
  if (tid < im2col_window_own(a, w, threads)) {
    const int64_t at = c * a.kernel * N + b * a.steps + t0 + tid;
    if (a.col16)
      for (int64_t k = 0; k < a.kernel; ++k) a.col16[at + k * N] = bf16_rn_bits(win[tid + k * a.dilation]);
    else
      for (int64_t k = 0; k < a.kernel; ++k) a.col[at + k * N] = win[tid + k * a.dilation];
  }
  im2col_window_history(a, t0, threads, threads, c, b, tid, win);
}

// With bf16 columns, an even step count and col16 on 4 bytes, a thread writes two consecutive
// steps' taps, one 4-byte store per tap: a block of `threads` threads then owns 2·threads steps
// (the window functions above with 2·threads as the block's steps).
CHORUS_HD bool im2col_pairs_fit(const Im2col& a) {
  return a.col16 && a.steps % 2 == 0 && (reinterpret_cast<uintptr_t>(a.col16) & 3u) == 0;
}
CHORUS_HD void im2col_window_store_pairs(const Im2col& a, int64_t w, int64_t threads, int64_t c, int64_t b,
                                         int64_t tid, const float* win) {
  const int64_t per_block = 2 * threads, t0 = w * per_block, N = a.streams * a.steps, j = 2 * tid;
  if (j < im2col_window_own(a, w, per_block)) {
    const int64_t at = c * a.kernel * N + b * a.steps + t0 + j;
    for (int64_t k = 0; k < a.kernel; ++k) {
      const uint32_t pair = bf16_pair_bits(win[j + k * a.dilation], win[j + 1 + k * a.dilation]);
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<uint32_t*>(a.col16 + at + k * N) = pair;
#else
      std::memcpy(a.col16 + at + k * N, &pair, sizeof pair);
#endif
    }
  }
  im2col_window_history(a, t0, per_block, threads, c, b, tid, win);
}

// ---- depthwise causal conv (groups = channels), x and y channels-first [C, streams·steps] ----------
// y[c, b·steps + t] = bias[c] + Σ_k w[c, k]·padded_b(c, t + k·dilation), the history as im2col's.
struct Depthwise {
  StreamHist hist;
  const float* x = nullptr;
  int64_t channels = 0, steps = 0, streams = 0, kernel = 1, dilation = 1;
  const float* weight = nullptr;  // [C, kernel]
  const float* bias = nullptr;
  float* y = nullptr;
};

CHORUS_HD int64_t depthwise_elements(const Depthwise& a) {
  return a.channels * a.streams * a.steps + a.streams * a.channels * conv_history(a.kernel, a.dilation);
}

CHORUS_HD void depthwise_element(const Depthwise& a, int64_t i) {
  const int64_t H = conv_history(a.kernel, a.dilation), N = a.streams * a.steps;
  const Snake none{};
  if (i < a.channels * N) {
    const int64_t c = i / N, j = i % N, b = j / a.steps, t = j % a.steps;
    const float* hist = a.hist.in[b] + a.hist.offset;
    float acc = a.bias ? a.bias[c] : 0.0f;
    for (int64_t k = 0; k < a.kernel; ++k)
      acc += a.weight[c * a.kernel + k] * padded_at(hist, a.x, N, 1, H, b * a.steps, c, t + k * a.dilation, none);
    a.y[i] = acc;
  } else {
    const int64_t r = i - a.channels * N, per = a.channels * H, b = r / per, c = (r % per) / H, j = r % H;
    a.hist.out[b][a.hist.offset + c * H + j] =
        padded_at(a.hist.in[b] + a.hist.offset, a.x, N, 1, H, b * a.steps, c, a.steps + j, none);
  }
}

// ---- output of a causal transposed conv (stride <= kernel <= 2·stride) ---------------------------
// z = Wᵀ·x [cout·K, N] with N = streams·steps: z[(c·K + j)·N + col] is the contribution of input
// column col to output sample (col's local t)·stride + j of its stream. y [cout, N·stride]:
// y[c, b·steps·S + t·S + j] = bias[c] + z_prev + z_cur (earlier input first, as the CPU), where
// stream b's previous input column before t = 0 is its history [cout·K] (when kernel > stride),
// and the stream's last column of z becomes its next history.
struct TconvOut {
  StreamHist hist;  // unused (in/out null) when kernel == stride
  const float* z = nullptr;
  int64_t cout = 0, steps = 0, streams = 0, kernel = 1, stride = 1;
  const float* bias = nullptr;
  float* y = nullptr;
};

CHORUS_HD bool tconv_overlaps(const TconvOut& a) { return a.kernel > a.stride; }

CHORUS_HD int64_t tconv_elements(const TconvOut& a) {
  return a.cout * a.streams * a.steps * a.stride + (tconv_overlaps(a) ? a.streams * a.cout * a.kernel : 0);
}

CHORUS_HD void tconv_element(const TconvOut& a, int64_t i) {
  const int64_t N = a.streams * a.steps, S = a.stride, K = a.kernel, len = N * S;
  if (i < a.cout * len) {
    const int64_t c = i / len, p = i % len, b = p / (a.steps * S), q = p % (a.steps * S), t = q / S, j = q % S;
    const int64_t col = b * a.steps + t;
    float v = a.bias ? a.bias[c] : 0.0f;
    const int64_t jp = j + S;  // tap of the previous input column that lands on this sample
    if (jp < K) v += t > 0 ? a.z[(c * K + jp) * N + col - 1] : a.hist.in[b][a.hist.offset + c * K + jp];
    v += a.z[(c * K + j) * N + col];
    a.y[i] = v;
  } else {
    const int64_t r = i - a.cout * len, per = a.cout * K, b = r / per, row = r % per;
    a.hist.out[b][a.hist.offset + row] = a.z[row * N + b * a.steps + a.steps - 1];
  }
}

// ---- per-channel element-wise op on [C, T] data ----------------------------------------------------
// x(c, t) at x[c·xcs + t·xts], y likewise: v = x + bias[c] (when bias), then SnakeBeta (when
// snake.alpha), then v += residual (when set, channels-first [C, T]), then clamp to [−1, 1] (when
// clamp; NaN stays NaN). With y16 the result goes there as bf16 (bf16_rn_bits, y's layout) and y is
// not written: the input of a product with bf16 operands (gemm_bf16_operands), the same bits as
// rounding the f32 value in the GEMM.
struct ChannelOp {
  const float* x = nullptr;
  int64_t xcs = 0, xts = 0;
  float* y = nullptr;
  uint16_t* y16 = nullptr;
  int64_t ycs = 0, yts = 0;
  int64_t channels = 0, steps = 0;
  const float* bias = nullptr;
  Snake snake;
  const float* residual = nullptr;
  bool clamp = false;
};

// The output for input v of channel c, r being the residual's value there (when op has one).
CHORUS_HD float channel_value(const ChannelOp& op, int64_t c, float v, float r) {
  if (op.bias) v += op.bias[c];
  if (op.snake.alpha) v = snake_at(v, op.snake.alpha[c], op.snake.inv_beta[c]);
  if (op.residual) v += r;
  if (op.clamp) v = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
  return v;
}

CHORUS_HD void channel_element(const ChannelOp& op, int64_t i) {
  const int64_t c = i / op.steps, t = i % op.steps;
  const float v = channel_value(op, c, op.x[c * op.xcs + t * op.xts], op.residual ? op.residual[i] : 0.0f);
  if (op.y16) op.y16[c * op.ycs + t * op.yts] = bf16_rn_bits(v);
  else op.y[c * op.ycs + t * op.yts] = v;
}

// Four consecutive steps at once (the codec's channels-first activations): whether op allows it,
// i.e. unit steps along t, whole quads per channel, and x, y (or y16) and the residual aligned
// for 16-byte (8 for y16) accesses at every quad.
inline bool channel_quads_fit(const ChannelOp& op) {
  auto on = [](const void* p, uintptr_t to) { return (reinterpret_cast<uintptr_t>(p) & (to - 1)) == 0; };
  return op.xts == 1 && op.yts == 1 && op.steps % 4 == 0 && op.xcs % 4 == 0 && op.ycs % 4 == 0 && on(op.x, 16) &&
         (op.y16 ? on(op.y16, 8) : on(op.y, 16)) && (!op.residual || on(op.residual, 16));
}

// Steps t .. t + 3 of channel c (t a multiple of 4; channel_quads_fit): channel_element's values,
// loaded and stored four at a time.
CHORUS_HD void channel_quad(const ChannelOp& op, int64_t c, int64_t t) {
  float x[4], r[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t i = c * op.steps + t;
#if defined(__CUDA_ARCH__)
  const float4 xv = *reinterpret_cast<const float4*>(op.x + c * op.xcs + t);
  x[0] = xv.x, x[1] = xv.y, x[2] = xv.z, x[3] = xv.w;
  if (op.residual) {
    const float4 rv = *reinterpret_cast<const float4*>(op.residual + i);
    r[0] = rv.x, r[1] = rv.y, r[2] = rv.z, r[3] = rv.w;
  }
#else
  for (int j = 0; j < 4; ++j) {
    x[j] = op.x[c * op.xcs + t + j];
    if (op.residual) r[j] = op.residual[i + j];
  }
#endif
  float v[4];
  for (int j = 0; j < 4; ++j) v[j] = channel_value(op, c, x[j], r[j]);
  const int64_t at = c * op.ycs + t;
  if (op.y16) {
    const uint32_t lo = bf16_pair_bits(v[0], v[1]), hi = bf16_pair_bits(v[2], v[3]);
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<uint2*>(op.y16 + at) = make_uint2(lo, hi);
#else
    const uint32_t both[2] = {lo, hi};
    std::memcpy(op.y16 + at, both, sizeof both);
#endif
    return;
  }
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(op.y + at) = make_float4(v[0], v[1], v[2], v[3]);
#else
  for (int j = 0; j < 4; ++j) op.y[at + j] = v[j];
#endif
}

// ---- the decoder transformer's attention ring, per stream ----------------------------------------
// Stream b keeps every layer's keys and values in one buffer base[b]: [layer][k|v][capacity[b]][kv_dim],
// position p in row p mod capacity[b]; its rows of this step are at positions pos0[b] + i.
struct StreamKv {
  float* const* base = nullptr;
  const int64_t* capacity = nullptr;
  const int64_t* pos0 = nullptr;
  int64_t layer = 0, kv_dim = 0;
};

CHORUS_HD float* kv_row(const StreamKv& kv, int64_t b, bool value, int64_t pos) {
  const int64_t cap = kv.capacity[b];
  return kv.base[b] + ((2 * kv.layer + (value ? 1 : 0)) * cap + pos % cap) * kv.kv_dim;
}

// Keys visible to the query at position p: positions first .. p, at most `window` of them.
CHORUS_HD int64_t window_first(int64_t p, int64_t window) { return p - window + 1 > 0 ? p - window + 1 : 0; }

// Rope of the q and k heads of one row of qkv [streams·n, (Hq + 2·Hkv)·D] and the ring store of k, v.
// Element idx = (row, head among q and k heads, rotation pair i).
struct RopeStore {
  const float* qkv = nullptr;
  int64_t n = 0, streams = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  const float* inv_freq = nullptr;
  StreamKv kv;
  float* q_out = nullptr;  // [streams·n, Hq·D]
};

CHORUS_HD int64_t rope_store_elements(const RopeStore& a) {
  return a.streams * a.n * (a.q_heads + a.kv_heads) * (a.head_dim / 2);
}

CHORUS_HD void rope_store_element(const RopeStore& a, int64_t idx) {
  const int64_t D = a.head_dim, half = D / 2, heads = a.q_heads + a.kv_heads;
  const int64_t i = idx % half, h = (idx / half) % heads, r = idx / (half * heads);
  const int64_t b = r / a.n, pos = a.kv.pos0[b] + r % a.n;
  const int64_t ld = (a.q_heads + 2 * a.kv_heads) * D;
  const float angle = static_cast<float>(pos) * a.inv_freq[i];
  const float c = cosf(angle), s = sinf(angle);
  const float* src = a.qkv + r * ld + h * D;  // q heads then k heads, contiguous
  const float x = src[i], y = src[i + half];
  const float lo = x * c - y * s, hi = y * c + x * s;
  if (h < a.q_heads) {
    float* dst = a.q_out + r * a.q_heads * D + h * D;
    dst[i] = lo;
    dst[i + half] = hi;
  } else {
    const int64_t g = h - a.q_heads;
    float* kd = kv_row(a.kv, b, false, pos) + g * D;
    kd[i] = lo;
    kd[i + half] = hi;
    const float* vs = a.qkv + r * ld + (a.q_heads + a.kv_heads) * D + g * D;
    float* vd = kv_row(a.kv, b, true, pos) + g * D;
    vd[i] = vs[i];
    vd[i + half] = vs[i + half];
  }
}

// ---- batch-invariant GEMM on tensor cores (3xTF32) ----------------------------------------------
// Row-major C[M, N] = alpha·op(A)[M, K]·op(B)[K, N] + beta·C. The arithmetic of one element
// c(m, n), the same in every kernel (codec_gemm.cu, codec_gemm_wide.cu, codec_gemm_tiles.h):
//   - K is cut into chunks of kGemmKChunk (a constant, so the cut depends on K alone);
//   - a chunk's sum starts at +0 and takes ceil(length / 8) k-steps of kGemmKStep = 8 in
//     ascending k, the values past the chunk's end being zero;
//   - in a step every a and b is split into x_hi = tf32(x) and x_lo = tf32(x − x_hi), tf32()
//     being cvt.rna.tf32.f32 (nearest, ties away from zero, 10 explicit mantissa bits), and
//     mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 is issued three times into the same
//     accumulator: a_lo·b_hi, then a_hi·b_lo, then a_hi·b_hi (the small terms first, so that the
//     large one's rounding does not swallow them); a_lo·b_lo (about 2^-22 of a·b) is dropped;
//   - the chunk sums are added in order (add_rn), then v = alpha·sum (unless alpha == 1) and
//     v += beta·C (when beta != 0), each rounded.
// An mma computes each element of its 16×8 tile from that element's row of A and column of B
// alone, by the same circuit wherever the element sits, so the result depends on row m of op(A),
// column n of op(B) and K only — never on M, N, the tile shape or the position in a tile or
// fragment. So a stream's columns come out bit-identical whether multiplied alone or among
// thousands of other streams' columns, which cuBLAS does not promise (it picks kernels and
// split-K by shape). The split makes the products f32-accurate (within 3·2^-22 of |a·b|, where one
// TF32 product errs by up to 2^-10) at the tensor cores' rate; the mma's accumulation is not
// IEEE-sequential, so these bits are checked on the device (tests/gpu/codec_gemm_cuda_test.cpp)
// and only the data flow on the host. A non-finite input makes its outputs NaN (x − x_hi of an
// infinity); the codec's activations and weights are finite.
//
// With bf16 operands (GemmPrecision::kBf16) the same holds with another step: a chunk takes
// ceil(length / 16) k-steps of 16, every a and b is rounded to bf16 (cvt.rn: nearest, ties to
// even, 8 significant bits), and one mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 per step
// accumulates in f32 (products exact, so each product errs by up to 2^-8 of |a·b|, as in a bf16
// framework's matmul). The chunking, the chunk sums and the epilogue are the f32 path's, so a
// stream's samples are batch-invariant in either precision; the two precisions differ from each
// other.
//
// Where the chunks are computed is free: a launch gives each block `group` consecutive chunks
// (blockIdx.z picks the group). A block holding every chunk adds its chunk sums in order in
// registers and writes C through the epilogue; otherwise each chunk sum goes to `partial` and
// gemm_reduce_element adds them in order — the same additions either way. The short chunk (256)
// gives the K-heavy, small-M·N products of a few streams enough independent blocks to fill the
// GPU; large products keep one group (no scratch traffic).
constexpr int64_t kGemmKChunk = 256;
constexpr int kGemmKStep = 8;

// The operands' precision in the tensor cores: kF32 (3xTF32, f32-level accuracy) or kBf16 (one
// bf16 product per step: a sixth of the mma instructions per k, no split).
enum class GemmPrecision { kF32, kBf16 };

// The k of one step: 8 (m16n8k8 .tf32) or 16 (m16n8k16 .bf16).
CHORUS_HD int gemm_k_step(GemmPrecision p) { return p == GemmPrecision::kBf16 ? 16 : kGemmKStep; }

// The number of K chunks (K = 0 still has one, empty: C gets the epilogue of a zero sum).
CHORUS_HD int64_t gemm_chunks(int64_t K) { return K <= kGemmKChunk ? 1 : (K + kGemmKChunk - 1) / kGemmKChunk; }

// The number of k-steps of a chunk of `length` k.
CHORUS_HD int64_t gemm_chunk_steps(int64_t length) { return (length + kGemmKStep - 1) / kGemmKStep; }

struct GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* A = nullptr;  // [M, K] (lda) or, transposed, stored [K, M]
  int64_t lda = 0;
  const float* B = nullptr;  // [K, N] (ldb) or, transposed, stored [N, K]
  int64_t ldb = 0;
  const uint16_t* A16 = nullptr;  // gemm_bf16_operands: A [M, K] and B [K, N] as bf16 bits, in place
  const uint16_t* B16 = nullptr;  // of A and B
  float* C = nullptr;  // [M, N] (ldc)
  int64_t ldc = 0;
  float* partial = nullptr;  // [chunks, M, N] chunk sums when group < chunks
  int64_t chunks = 1;        // gemm_chunks(K)
  int64_t group = 1;         // chunks per block
  GemmPrecision precision = GemmPrecision::kF32;
};

// Whether a block holds every chunk (and so adds the chunk sums itself).
CHORUS_HD bool gemm_whole_k(const GemmArgs& g) { return g.group >= g.chunks; }

// The number of chunk groups (the grid's z).
CHORUS_HD int64_t gemm_groups(const GemmArgs& g) { return (g.chunks + g.group - 1) / g.group; }

CHORUS_HD float gemm_a(const GemmArgs& g, bool ta, int64_t m, int64_t k) {
  return ta ? g.A[k * g.lda + m] : g.A[m * g.lda + k];
}
CHORUS_HD float gemm_b(const GemmArgs& g, bool tb, int64_t k, int64_t n) {
  return tb ? g.B[n * g.ldb + k] : g.B[k * g.ldb + n];
}

CHORUS_HD float gemm_epilogue(const GemmArgs& g, float sum, int64_t m, int64_t n) {
  float v = g.alpha == 1.0f ? sum : mul_rn(g.alpha, sum);
  if (g.beta != 0.0f) v = add_rn(v, mul_rn(g.beta, g.C[m * g.ldc + n]));
  return v;
}

// The running sum of an element after chunk `chunk` (its first chunk is 0): the contract's
// in-order addition, the first sum taken as it is.
CHORUS_HD float gemm_add_chunk(float running, float chunk_sum, int64_t chunk) {
  return chunk == 0 ? chunk_sum : add_rn(running, chunk_sum);
}

// Element idx = m·N + n of C when the chunks were split over blocks: the chunk sums in order,
// then the epilogue.
CHORUS_HD void gemm_reduce_element(const GemmArgs& g, int64_t idx) {
  const int64_t m = idx / g.N, n = idx % g.N, mn = g.M * g.N;
  float sum = 0.0f;
  for (int64_t c = 0; c < g.chunks; ++c) sum = gemm_add_chunk(sum, g.partial[c * mn + idx], c);
  g.C[m * g.ldc + n] = gemm_epilogue(g, sum, m, n);
}

// The k range [begin, end) of the chunks of group `z`.
CHORUS_HD void gemm_group_k(const GemmArgs& g, int64_t z, int64_t& begin, int64_t& end) {
  begin = z * g.group * kGemmKChunk;
  const int64_t e = begin + g.group * kGemmKChunk;
  end = e < g.K ? e : g.K;
}

}  // namespace chorus::cuda::codec_ops
