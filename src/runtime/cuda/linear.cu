// linear: matrix-vector kernels for one or two rows (a stream's decode step, a guided pair), bf16
// tensor cores for more: linear_tensor.cu with three-part inputs for 3 to 8 rows of bf16 matrices
// (rows a multiple of 8 long), cuBLAS for many rows (prefill, large batches), or, with a workspace
// that asks for every row count on the tensor path (batch invariance), linear_tensor.cu throughout.
//
// GEMV: one warp per output feature; each lane reads 16 bytes (8 bf16) of the weight row per
// iteration and multiplies them with up to MT input rows, so the weights are read once per
// MT rows. A feature's sum is always reduced the same way (lane l sums k = 8l + 256i + j in order,
// then a butterfly over lanes), whatever M and the tile are: a row's result does not depend on
// which other rows share the call. RMS-norm of the input, the bias, the residual add and SwiGLU are
// fused in, so a Qwen3 layer needs four matrix launches. Quantised matrices take their own kernels
// (linear_quant.cu) and share the cuBLAS path below after a dequantisation.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/linear_quant.h"
#include "runtime/cuda/linear_tensor.h"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

using Seg = detail::TensorSeg;  // one output matrix: weights, bias, destination

struct GemvParams {
  const float* x;
  int64_t ldx;
  int64_t M;
  int64_t K;
  const float* norm_w;
  float eps;
  Seg seg[3];
  int nseg;
  int64_t rows_total;  // features computed (for SwiGLU: the gate's rows)
  bool bf16;           // bf16-activation mode: normed inputs and outputs stored as bf16
  bool round_out;      // with bf16: the stored products rounded (LinearArgs::round_outputs)
  L2Prefetch prefetch[4];
};

// Thread 0 of each block (of the grid's first row of blocks) issues the block's share of the
// requested L2 prefetches.
__device__ __forceinline__ void issue_prefetch(const GemvParams& p) {
  if (threadIdx.x != 0 || blockIdx.y != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) dev::prefetch_l2_share(p.prefetch[i].ptr, p.prefetch[i].bytes, blockIdx.x, gridDim.x);
}

constexpr int kPrefetch = 4;  // 16-byte weight loads per lane and row issued before the PDL wait

// NW weight rows (1, or 2 for SwiGLU's gate and up) against MT input rows. `pre` holds the first
// kPrefetch 16-byte chunks of each row (VEC path), loaded before the kernel waited for its inputs.
template <int MT, int NW, bool VEC, bool BF16>
__device__ __forceinline__ void dot_rows(const GemvParams& p, const uint16_t* const (&w)[NW],
                                         const uint4 (&pre)[NW][kPrefetch], int64_t m0, const float* inv,
                                         float (&acc)[NW][MT]) {
  const int lane = threadIdx.x & 31;
  const uint64_t pol = dev::weight_l2_policy();
  const int64_t K = p.K;
  const float* xr[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) xr[m] = p.x + min(m0 + m, p.M - 1) * p.ldx;
#pragma unroll
  for (int r = 0; r < NW; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  if constexpr (VEC) {
    auto step = [&](int64_t k, const uint4 (&wv)[NW]) {
      float wf[NW][8];
#pragma unroll
      for (int r = 0; r < NW; ++r) dev::unpack8(wv[r], wf[r]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        float xv[8];
        dev::load_x8(xr[m], k, p.norm_w, p.norm_w ? inv[m] : 1.0f, BF16, xv);
#pragma unroll
        for (int r = 0; r < NW; ++r)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r][m] = fmaf(wf[r][j], xv[j], acc[r][m]);
      }
    };
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      const int64_t k = lane * 8 + 256 * i;
      if (k < K) {
        uint4 wv[NW];
#pragma unroll
        for (int r = 0; r < NW; ++r) wv[r] = pre[r][i];
        step(k, wv);
      }
    }
#pragma unroll 4
    for (int64_t k = lane * 8 + 256 * kPrefetch; k < K; k += 256) {
      uint4 wv[NW];
#pragma unroll
      for (int r = 0; r < NW; ++r) wv[r] = dev::load_weights(w[r] + k, pol);
      step(k, wv);
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      float wf[NW];
#pragma unroll
      for (int r = 0; r < NW; ++r) wf[r] = dev::bf16_bits_to_f32(w[r][k]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        float xv = xr[m][k];
        if (p.norm_w) xv = BF16 ? dev::norm_bf16(xv, inv[m], p.norm_w[k]) : __fmul_rn(__fmul_rn(xv, inv[m]), p.norm_w[k]);
#pragma unroll
        for (int r = 0; r < NW; ++r) acc[r][m] = fmaf(wf[r], xv, acc[r][m]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < NW; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = dev::warp_sum(acc[r][m]);
}

template <int MT, int EPI, bool VEC, bool BF16>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) gemv_kernel(GemvParams p) {
  constexpr int NW = EPI == 2 ? 2 : 1;
  __shared__ float inv_s[MT];
  __shared__ double red[kWarpsPerBlock][MT];
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * MT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t feature = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const bool valid = feature < p.rows_total;

  // Which weight row(s) this warp reads; then their first chunks, before waiting for the inputs.
  int si = 0;
  int64_t n = valid ? feature : 0;
  if (EPI != 2)
    while (si + 1 < p.nseg && n >= p.seg[si].n) {
      n -= p.seg[si].n;
      ++si;
    }
  const uint16_t* w[NW];
  if constexpr (NW == 2) {
    w[0] = p.seg[0].w + n * p.K;
    w[1] = p.seg[1].w + n * p.K;
  } else {
    w[0] = p.seg[si].w + n * p.K;
  }
  uint4 pre[NW][kPrefetch];
  const uint64_t pol = dev::weight_l2_policy();
#pragma unroll
  for (int r = 0; r < NW; ++r)
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      const int64_t k = lane * 8 + 256 * i;
      pre[r][i] = VEC && valid && k < p.K ? dev::load_weights(w[r] + k, pol) : make_uint4(0, 0, 0, 0);
    }
  issue_prefetch(p);
  dev::pdl_wait();

  if (p.norm_w) {  // 1 / RMS of each input row (f64 sums, as cpu::rms_norm), all rows in one pass
    double ss[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      ss[m] = 0.0;
      const float* xr = p.x + min(m0 + m, p.M - 1) * p.ldx;
      for (int64_t k = threadIdx.x; k < p.K; k += blockDim.x) ss[m] += static_cast<double>(xr[k]) * xr[k];
      ss[m] = dev::warp_sum(ss[m]);
    }
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < MT; ++m) red[warp][m] = ss[m];
    __syncthreads();
    if (threadIdx.x < MT) {
      double t = 0.0;
      for (int w = 0; w < kWarpsPerBlock; ++w) t += red[w][threadIdx.x];
      inv_s[threadIdx.x] = dev::inv_rms(t, p.K, p.eps, BF16);
    }
    __syncthreads();
  }
  if (!valid) return;
  float inv[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) inv[m] = p.norm_w ? inv_s[m] : 1.0f;

  float acc[NW][MT];
  dot_rows<MT, NW, VEC, BF16>(p, w, pre, m0, inv, acc);
  if (lane != 0) return;
  if constexpr (EPI == 2) {  // SwiGLU
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m0 + m >= p.M) break;
      const float g = acc[0][m] + (p.seg[0].bias ? p.seg[0].bias[n] : 0.0f);
      const float u = acc[1][m] + (p.seg[1].bias ? p.seg[1].bias[n] : 0.0f);
      p.seg[0].y[(m0 + m) * p.seg[0].ldy + n] = dev::swiglu_out(g, u, BF16);
    }
  } else {
    const Seg& sg = p.seg[si];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m0 + m >= p.M) break;
      const float v = sg.bias ? acc[0][m] + sg.bias[n] : acc[0][m];
      dev::store_out(sg.y + (m0 + m) * sg.ldy + n, v, EPI, BF16 && p.round_out);
    }
  }
}

// The single-row case (one stream's decode step), where every launch is on the critical path: no
// block barriers at all. Each warp computes ROWS features; it prefetches their first weight chunks,
// waits for its inputs, derives the RMS of x by itself (x is L1-resident), then reduces.
constexpr int kG1Warps = 8;

// DEEP (long rows, K >= kDeepK): the loop after the prefetched chunks loads kDeepChunks chunks per
// row before it multiplies any of them, so a warp keeps 8x more of its row in flight. The chunks
// are still summed in k order, so the result is bit-identical to the shallow loop. Only long rows
// get it: its registers would lower the occupancy of the short-row launches.
constexpr int kDeepChunks = 8;
constexpr int64_t kDeepK = 4096;

// PRE: 16-byte chunks per lane and row loaded before the wait. kWidePrefetch for rows of 2048 to
// 4095 (Breeze's backbone, the 1.7B talker): all of a 2048-long row, so no weight load waits for
// the norm; shorter rows are whole at kPrefetch, longer ones take the deep loop.
constexpr int kWidePrefetch = 8;

// NPRE: the norm weights of the prefetched chunks are loaded before the wait too, so the normed
// input does not wait for their round trip after it (H200, Breeze: -0.10 ms per frame together with
// the bulk MLP's). Launched for normed single rows of one feature per warp.
template <int NW, int EPI, int ROWS, bool BF16, bool DEEP, bool NPRE = false, int PRE = kPrefetch>
__global__ void __launch_bounds__(kG1Warps * 32) gemv1_kernel(GemvParams p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kG1Warps + warp) * ROWS;
  const int64_t K = p.K;
  const uint64_t pol = dev::weight_l2_policy();
  const uint16_t* w[ROWS][NW];
  int seg[ROWS];
  int64_t nrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int64_t f = min(first + r, p.rows_total - 1);
    int si = 0;
    int64_t n = f;
    if (EPI != 2)
      while (si + 1 < p.nseg && n >= p.seg[si].n) {
        n -= p.seg[si].n;
        ++si;
      }
    seg[r] = si;
    nrow[r] = n;
#pragma unroll
    for (int m = 0; m < NW; ++m) w[r][m] = p.seg[NW == 2 ? m : si].w + n * K;
  }
  uint4 pre[ROWS][NW][PRE];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < NW; ++m)
#pragma unroll
      for (int i = 0; i < PRE; ++i) {
        const int64_t k = lane * 8 + 256 * i;
        pre[r][m][i] = k < K ? dev::load_weights(w[r][m] + k, pol) : make_uint4(0, 0, 0, 0);
      }
  float gw[NPRE ? PRE : 1][8];
  if constexpr (NPRE) {
    if (p.norm_w)
#pragma unroll
      for (int i = 0; i < PRE; ++i)
        if (lane * 8 + 256 * i < K) dev::load_w8(p.norm_w, lane * 8 + 256 * i, gw[i]);
  }
  issue_prefetch(p);
  dev::pdl_wait();
  if (first >= p.rows_total) return;

  float inv = 1.0f;
  if (p.norm_w) {
    // The normed single rows of one feature per warp (NPRE) include the depth decoder's rows of
    // 1024; the other instantiations keep only the loop (see warp_sum_squares_1024).
    double ss;
    if (NPRE && K == 1024) ss = dev::warp_sum_squares_1024(p.x);
    else ss = dev::warp_sum_squares(p.x, K);
    inv = dev::inv_rms(ss, K, p.eps, BF16);
  }
  float acc[ROWS][NW];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < NW; ++m) acc[r][m] = 0.0f;
  auto products = [&](const float (&xv)[8], const uint4 (&wv)[ROWS][NW]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        float wf[8];
        dev::unpack8(wv[r][m], wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r][m] = fmaf(wf[j], xv[j], acc[r][m]);
      }
  };
  auto step = [&](int64_t k, const uint4 (&wv)[ROWS][NW], int pre_chunk = -1) {
    float xv[8];
    if (NPRE && p.norm_w && pre_chunk >= 0) dev::load_x8_normed(p.x, k, gw[NPRE ? pre_chunk : 0], inv, BF16, xv);
    else dev::load_x8(p.x, k, p.norm_w, inv, BF16, xv);
    products(xv, wv);
  };
  auto prefetched = [&](int i, uint4 (&wv)[ROWS][NW]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < NW; ++m) wv[r][m] = pre[r][m][i];
  };
  if (EPI == 1 && !p.norm_w) {
    // Residual products of inputs not normed here (o over the attention rows): every prefetched
    // chunk's x loaded before the first product (an in-range address for chunks past K, which are
    // not used), so they cost one round trip to L2, not one each behind the k < K branches. Only
    // this epilogue's instantiations carry it, so the normed launches compile as before.
    float xs[PRE][8];
#pragma unroll
    for (int i = 0; i < PRE; ++i) {
      const int64_t k = lane * 8 + 256 * i;
      dev::load_f8(p.x, k < K ? k : 0, xs[i]);
    }
#pragma unroll
    for (int i = 0; i < PRE; ++i)
      if (lane * 8 + 256 * i < K) {
        uint4 wv[ROWS][NW];
        prefetched(i, wv);
        products(xs[i], wv);
      }
  } else {
#pragma unroll
    for (int i = 0; i < PRE; ++i) {
      const int64_t k = lane * 8 + 256 * i;
      if (k < K) {
        uint4 wv[ROWS][NW];
        prefetched(i, wv);
        step(k, wv, i);
      }
    }
  }
  // Chunk k of every row of this warp → wv.
  auto load_chunk = [&](int64_t k, uint4 (&wv)[ROWS][NW]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int m = 0; m < NW; ++m) wv[r][m] = dev::load_weights(w[r][m] + k, pol);
  };
  int64_t k_rest = lane * 8 + 256 * PRE;
  if constexpr (DEEP) {
    for (; k_rest + 256 * (kDeepChunks - 1) < K; k_rest += 256 * kDeepChunks) {
      uint4 wv[kDeepChunks][ROWS][NW];
#pragma unroll
      for (int c = 0; c < kDeepChunks; ++c) load_chunk(k_rest + 256 * c, wv[c]);
#pragma unroll
      for (int c = 0; c < kDeepChunks; ++c) step(k_rest + 256 * c, wv[c]);
    }
  }
#pragma unroll 2
  for (int64_t k = k_rest; k < K; k += 256) {
    uint4 wv[ROWS][NW];
    load_chunk(k, wv);
    step(k, wv);
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < NW; ++m) acc[r][m] = dev::warp_sum(acc[r][m]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (first + r >= p.rows_total) break;
    const int64_t n = nrow[r];
    if constexpr (EPI == 2) {
      const float g = acc[r][0] + (p.seg[0].bias ? p.seg[0].bias[n] : 0.0f);
      const float u = acc[r][NW - 1] + (p.seg[1].bias ? p.seg[1].bias[n] : 0.0f);
      p.seg[0].y[n] = dev::swiglu_out(g, u, BF16);
    } else {
      const Seg& sg = p.seg[seg[r]];
      const float v = sg.bias ? acc[r][0] + sg.bias[n] : acc[r][0];
      dev::store_out(sg.y + n, v, EPI, BF16 && p.round_out);
    }
  }
}

template <int EPI, bool BF16, bool DEEP>
cudaError_t launch_gemv1_depth(const GemvParams& p, cudaStream_t s) {
  constexpr int NW = EPI == 2 ? 2 : 1;
  if constexpr (!DEEP && NW == 1) {  // (SwiGLU's two matrices would double the registers)
    if (p.K >= 32 * 8 * kWidePrefetch) {
      constexpr int W = kWidePrefetch;
      if (p.rows_total > 2048) {
        const unsigned blocks = static_cast<unsigned>((p.rows_total + 2 * kG1Warps - 1) / (2 * kG1Warps));
        return launch(gemv1_kernel<NW, EPI, 2, BF16, false, false, W>, dim3(blocks), dim3(kG1Warps * 32), 0, s, p);
      }
      // (Without the norm weights ahead, NPRE: with them this row length spills.)
      const unsigned blocks = static_cast<unsigned>((p.rows_total + kG1Warps - 1) / kG1Warps);
      return launch(gemv1_kernel<NW, EPI, 1, BF16, false, false, W>, dim3(blocks), dim3(kG1Warps * 32), 0, s, p);
    }
  }
  // Two features per warp for the large matrices keeps one wave of warps on the GPU.
  if (NW == 1 && p.rows_total > 2048) {
    const unsigned blocks = static_cast<unsigned>((p.rows_total + 2 * kG1Warps - 1) / (2 * kG1Warps));
    return launch(gemv1_kernel<NW, EPI, 2, BF16, DEEP>, dim3(blocks), dim3(kG1Warps * 32), 0, s, p);
  }
  const unsigned blocks = static_cast<unsigned>((p.rows_total + kG1Warps - 1) / kG1Warps);
  if constexpr (!DEEP)
    if (p.norm_w) return launch(gemv1_kernel<NW, EPI, 1, BF16, DEEP, true>, dim3(blocks), dim3(kG1Warps * 32), 0, s, p);
  return launch(gemv1_kernel<NW, EPI, 1, BF16, DEEP>, dim3(blocks), dim3(kG1Warps * 32), 0, s, p);
}

template <int EPI, bool BF16>
cudaError_t launch_gemv1(const GemvParams& p, cudaStream_t s) {
  if (p.K >= kDeepK) return launch_gemv1_depth<EPI, BF16, true>(p, s);
  return launch_gemv1_depth<EPI, BF16, false>(p, s);
}

template <int MT, int EPI, bool BF16>
cudaError_t launch_gemv_t(const GemvParams& p, bool vec, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.rows_total + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>((p.M + MT - 1) / MT));
  if (vec) return launch(gemv_kernel<MT, EPI, true, BF16>, grid, dim3(kWarpsPerBlock * 32), 0, s, p);
  return launch(gemv_kernel<MT, EPI, false, BF16>, grid, dim3(kWarpsPerBlock * 32), 0, s, p);
}

template <int EPI, bool BF16>
cudaError_t launch_gemv(const GemvParams& p, bool vec, cudaStream_t s) {
  if (p.M == 1) return launch_gemv_t<1, EPI, BF16>(p, vec, s);
  if (p.M == 2) return launch_gemv_t<2, EPI, BF16>(p, vec, s);
  if (p.M <= 4) return launch_gemv_t<4, EPI, BF16>(p, vec, s);
  return launch_gemv_t<8, EPI, BF16>(p, vec, s);
}

// The bf16-activation mode is a template parameter, so the f32 kernels carry no trace of it.
template <bool BF16>
cudaError_t launch_any_gemv(const GemvParams& p, bool single_row, bool vec, int epi, cudaStream_t s) {
  if (single_row)
    return epi == 0 ? launch_gemv1<0, BF16>(p, s) : epi == 1 ? launch_gemv1<1, BF16>(p, s) : launch_gemv1<2, BF16>(p, s);
  return epi == 0   ? launch_gemv<0, BF16>(p, vec, s)
         : epi == 1 ? launch_gemv<1, BF16>(p, vec, s)
                    : launch_gemv<2, BF16>(p, vec, s);
}

// ---- tensor-core path ----

// xs[m] = bf16(x̂), xs[M + m] = bf16(x̂ − bf16(x̂)) with x̂ = the (optionally RMS-normed) row m;
// with `three`, xs[2M + m] = bf16 of what those two leave (each difference is exact in f32, so the
// three parts add up to x̂ to f32 precision). (bf16 mode: x̂ is a bf16 value, so the rest is zero.)
__global__ void split_rows_kernel(const float* x, int64_t ldx, int64_t M, int64_t K, const float* norm_w, float eps,
                                  bool bf16, bool three, __nv_bfloat16* xs) {
  __shared__ double scratch[32];
  dev::pdl_wait();
  const int64_t m = blockIdx.x;
  const float* xr = x + m * ldx;
  float inv = 1.0f;
  if (norm_w && bf16) {
    double ss = 0.0;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) ss += static_cast<double>(xr[k]) * xr[k];
    inv = dev::inv_rms_bf16(dev::block_sum(ss, scratch), K, eps);
  } else if (norm_w) {
    inv = dev::block_inv_rms(xr, K, eps, scratch);
  }
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const float v = !norm_w ? xr[k] : bf16 ? dev::norm_bf16(xr[k], inv, norm_w[k]) : __fmul_rn(__fmul_rn(xr[k], inv), norm_w[k]);
    const __nv_bfloat16 hi = __float2bfloat16_rn(v);
    xs[m * K + k] = hi;
    const float rest = v - __bfloat162float(hi);
    const __nv_bfloat16 lo = __float2bfloat16_rn(rest);
    xs[(M + m) * K + k] = lo;
    if (three) xs[(2 * M + m) * K + k] = __float2bfloat16_rn(rest - __bfloat162float(lo));
  }
}

struct CombineParams {
  const float* ys[3];  // [2M, n] each
  Seg seg[3];
  int nseg;
  int64_t M;
  int epi;
  bool bf16;
  bool round_out;
};

__global__ void combine_kernel(CombineParams p) {
  dev::pdl_wait();
  const int64_t m = blockIdx.y;
  const int64_t n_total = p.epi == 2 ? p.seg[0].n : p.seg[0].n + p.seg[1].n + p.seg[2].n;
  for (int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < n_total;
       f += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (p.epi == 2) {
      const int64_t n = p.seg[0].n;
      const float g = p.ys[0][m * n + f] + p.ys[0][(p.M + m) * n + f] + (p.seg[0].bias ? p.seg[0].bias[f] : 0.0f);
      const float u = p.ys[1][m * n + f] + p.ys[1][(p.M + m) * n + f] + (p.seg[1].bias ? p.seg[1].bias[f] : 0.0f);
      p.seg[0].y[m * p.seg[0].ldy + f] = dev::swiglu_out(g, u, p.bf16);
      continue;
    }
    int si = 0;
    int64_t n = f;
    while (si + 1 < p.nseg && n >= p.seg[si].n) {
      n -= p.seg[si].n;
      ++si;
    }
    const Seg& sg = p.seg[si];
    float v = p.ys[si][m * sg.n + n] + p.ys[si][(p.M + m) * sg.n + n];
    if (sg.bias) v += sg.bias[n];
    dev::store_out(sg.y + m * sg.ldy + n, v, p.epi, p.bf16 && p.round_out);
  }
}

Status cublas_ok(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return ok_status();
  return make_error(ErrorCode::kInternal,
                    std::string("cuBLAS: ") + what + " failed (status " + std::to_string(static_cast<int>(st)) + ")");
}

}  // namespace

Result<LinearWorkspace> LinearWorkspace::create(int64_t max_rows, int64_t max_k, int64_t max_n_total,
                                                int64_t max_dequant, bool every_row_tensor) {
  LinearWorkspace w;
  w.max_rows_ = max_rows;
  w.max_k_ = max_k;
  w.max_n_ = max_n_total;
  w.every_row_tensor_ = every_row_tensor;
  CHORUS_ASSIGN(w.cublas_, Cublas::create());
  if (max_rows >= kTensorMinRows || every_row_tensor) {
    const int64_t parts = std::max(2 * max_rows, 3 * std::min(max_rows, detail::kTensorThreePartRows));
    CHORUS_ASSIGN(w.x_split_, DeviceBuffer::alloc(static_cast<size_t>(parts * max_k) * sizeof(uint16_t)));
    // cuBLAS's two partial products, or the tensor kernel's chunk values (the chunks of up to 2048
    // k: longer rows are then summed by one block each, with the same results).
    const int64_t y_floats = std::max(
        2 * max_rows * max_n_total,
        detail::tensor_linear_partial_floats(max_rows, std::min<int64_t>(max_k, 2048), max_n_total));
    CHORUS_ASSIGN(w.y_split_, DeviceBuffer::alloc(static_cast<size_t>(y_floats) * sizeof(float)));
    if (max_dequant > 0) {
      w.max_dequant_ = max_dequant;
      CHORUS_ASSIGN(w.w_split_, DeviceBuffer::alloc(static_cast<size_t>(2 * max_dequant) * sizeof(uint16_t)));
    }
  }
  CHORUS_ASSIGN(w.cublas_ws_, DeviceBuffer::alloc(size_t{32} << 20));
  return std::move(w);
}

Status linear(const LinearArgs& a, LinearWorkspace* ws, cudaStream_t s, int path) {
  if (a.M <= 0) return ok_status();
  if (a.outputs < 1 || a.outputs > 3 || (a.epilogue == Epilogue::kSwiGlu && a.outputs != 2))
    return make_error(ErrorCode::kInternal, "cuda linear: bad output count");
  const bool quant = a.out[0].w.quantized();
  if (quant)
    if (const char* why = detail::quant_args_problem(a); *why)
      return make_error(ErrorCode::kInternal, std::string("cuda linear: ") + why);
  const int64_t K = a.out[0].w.cols;
  GemvParams p{};
  p.x = a.x;
  p.ldx = a.ldx;
  p.M = a.M;
  p.K = K;
  p.norm_w = a.norm_weight;
  p.eps = a.norm_eps;
  p.nseg = a.outputs;
  p.rows_total = 0;
  p.bf16 = a.bf16;
  p.round_out = a.round_outputs;
  if (!a.round_outputs && a.epilogue != Epilogue::kStore)
    return make_error(ErrorCode::kInternal, "cuda linear: unrounded outputs are for kStore only");
  for (int i = 0; i < 4; ++i) p.prefetch[i] = a.prefetch[i];
  bool vec = K % 8 == 0 && a.ldx % 4 == 0 && aligned16(a.x) && (!a.norm_weight || aligned16(a.norm_weight));
  for (int i = 0; i < a.outputs; ++i) {
    const LinearOut& o = a.out[i];
    if (o.w.cols != K || (!quant && !o.w.data) || !o.y)
      return make_error(ErrorCode::kInternal, "cuda linear: outputs disagree on the input width");
    p.seg[i] = {o.w.data, o.bias, o.y, o.ldy, o.w.rows};
    p.rows_total += o.w.rows;
    vec = vec && aligned16(o.w.data);
  }
  const int epi = a.epilogue == Epilogue::kStore ? 0 : a.epilogue == Epilogue::kAdd ? 1 : 2;
  if (epi == 2) {
    if (a.out[1].w.rows != a.out[0].w.rows) return make_error(ErrorCode::kInternal, "cuda linear: SwiGLU shapes");
    p.rows_total = a.out[0].w.rows;
  }
  int64_t n_sum = 0;
  for (int i = 0; i < a.outputs; ++i) n_sum += a.out[i].w.rows;
  bool tensor_ok = !quant && K % 8 == 0;  // what linear_tensor.cu takes
  for (int i = 0; i < a.outputs; ++i) tensor_ok = tensor_ok && aligned16(a.out[i].w.data);
  // 3 to 8 rows of bf16 matrices: the tensor kernel with three-part inputs, as accurate as the
  // matrix-vector kernels, whose cost grows with every row (each row's inputs loaded and normed
  // again for every feature). Where the workspace cannot take them, the matrix-vector kernels.
  const bool few_rows = path == kLinearAuto && ws && !ws->every_row_tensor_ && tensor_ok && a.M >= kTensorMinRows &&
                        a.M <= kGemvMaxRows && a.M <= ws->max_rows_ && K <= ws->max_k_ && n_sum <= ws->max_n_ &&
                        ws->x_split_.data();
  // Quantised matrices keep the matrix-vector kernels for few rows even in every-row-tensor mode
  // (their tensor path goes through cuBLAS, which is not row-invariant either).
  const bool gemv = path == kLinearGemv || (path == kLinearAuto && a.M <= kGemvMaxRows && !few_rows &&
                                            !(ws && ws->every_row_tensor_ && !quant));
  if (gemv && quant) return detail::gemv_quant(a, s);
  if (gemv) {
    const bool single_row = a.M == 1 && vec;
    CHORUS_CUDA_TRY(p.bf16 ? launch_any_gemv<true>(p, single_row, vec, epi, s)
                           : launch_any_gemv<false>(p, single_row, vec, epi, s));
    return ok_status();
  }

  if (!ws || a.M > ws->max_rows_ || K > ws->max_k_ || !ws->x_split_.data())
    return make_error(ErrorCode::kInternal, "cuda linear: workspace too small for " + std::to_string(a.M) + " rows");
  if (n_sum > ws->max_n_) return make_error(ErrorCode::kInternal, "cuda linear: workspace too small for the outputs");
  for (int i = 0; i < a.outputs && quant; ++i)
    if (a.out[i].w.rows * K > ws->max_dequant_)
      return make_error(ErrorCode::kInternal, "cuda linear: workspace too small to dequantise the weights");
  auto* xs = ws->x_split_.as<__nv_bfloat16>();
  const bool three = few_rows && !a.bf16;
  CHORUS_CUDA_TRY(launch(split_rows_kernel, dim3(static_cast<unsigned>(a.M)), dim3(256), 0, s, a.x, a.ldx, a.M, K,
                         a.norm_weight, a.norm_eps, a.bf16, three, xs));
  CHORUS_CUDA_LAUNCHED("split_rows_kernel");
  // The row-invariant kernel for many rows only where invariance is asked for: at 128 and more rows
  // it is still several times slower than cuBLAS (docs/cuda.md).
  if (few_rows || (ws->every_row_tensor_ && tensor_ok)) {
    detail::TensorLinearArgs t;
    t.xhi = reinterpret_cast<const uint16_t*>(xs);
    t.xlo = t.xhi + a.M * K;
    t.xlo2 = three ? t.xhi + 2 * a.M * K : nullptr;
    t.lo_zero = a.bf16;
    t.M = a.M;
    t.K = K;
    for (int i = 0; i < a.outputs; ++i) t.seg[i] = p.seg[i];
    t.nseg = a.outputs;
    t.features = p.rows_total;
    t.epi = epi;
    t.bf16 = a.bf16;
    t.round_out = a.round_outputs;
    t.partial = ws->y_split_.as<float>();
    CHORUS_CUDA_TRY(detail::tensor_linear(t, static_cast<int64_t>(ws->y_split_.bytes() / sizeof(float)), s));
    CHORUS_CUDA_LAUNCHED("tensor_linear");
    return ok_status();
  }
  cublasHandle_t h = ws->cublas_.get();
  CHORUS_TRY(cublas_ok(cublasSetStream(h, s), "cublasSetStream"));
  CHORUS_TRY(cublas_ok(cublasSetWorkspace(h, ws->cublas_ws_.data(), ws->cublas_ws_.bytes()), "cublasSetWorkspace"));
  CombineParams c{};
  c.nseg = a.outputs;
  c.M = a.M;
  c.epi = epi;
  c.bf16 = a.bf16;
  c.round_out = a.round_outputs;
  float* ys = ws->y_split_.as<float>();
  const float one = 1.0f, zero = 0.0f;
  for (int i = 0; i < a.outputs; ++i) {
    const int64_t n = a.out[i].w.rows;
    const void* w_hi = a.out[i].w.data;
    const uint16_t* w_lo = nullptr;
    if (quant) {  // dequantised into the workspace, high part then low part (reused by each output)
      uint16_t* hi = ws->w_split_.as<uint16_t>();
      w_lo = hi + n * K;
      CHORUS_TRY(detail::dequantize_split(a.out[i].w, hi, hi + n * K, s));
      w_hi = hi;
    }
    // Column-major view: Y[n, 2M] = Wᵀ[n, K] · X[K, 2M].
    CHORUS_TRY(cublas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(2 * a.M),
                                      static_cast<int>(K), &one, w_hi, CUDA_R_16BF, static_cast<int>(K), xs,
                                      CUDA_R_16BF, static_cast<int>(K), &zero, ys, CUDA_R_32F, static_cast<int>(n),
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "cublasGemmEx"));
    if (w_lo) {  // Y[n, 0:M] += W_loᵀ · X_hi: the weights' low part against the inputs' high part
      CHORUS_TRY(cublas_ok(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(a.M),
                                        static_cast<int>(K), &one, w_lo, CUDA_R_16BF, static_cast<int>(K), xs,
                                        CUDA_R_16BF, static_cast<int>(K), &one, ys, CUDA_R_32F, static_cast<int>(n),
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           "cublasGemmEx"));
    }
    c.ys[i] = ys;
    c.seg[i] = p.seg[i];
    ys += 2 * a.M * n;
  }
  if (epi != 2)
    for (int i = a.outputs; i < 3; ++i) c.seg[i].n = 0;
  const int64_t n_out = epi == 2 ? a.out[0].w.rows : n_sum;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n_out + 255) / 256, 64)), static_cast<unsigned>(a.M));
  CHORUS_CUDA_TRY(launch(combine_kernel, grid, dim3(256), 0, s, c));
  CHORUS_CUDA_LAUNCHED("combine_kernel");
  return ok_status();
}

}  // namespace chorus::cuda
