// cuda::linear for quantised matrices (int8 / fp8 codes with f16 group scales, runtime/cpu/row_quant.h).
//
// Matrix-vector kernel (few rows): one warp per output feature (two weight rows for SwiGLU's gate
// and up); lane l reads 16 codes at k = 16·l + 512·i per chunk (quant_util.cuh), dequantises them in
// registers (code · scale, exact in f32) and accumulates the products with up to MT input rows in
// f32, in the same order for any M, so a row's result does not depend on which rows share the call.
// Each lane's first kPre chunks (rows up to 2048 codes: all of them) and their scales are loaded
// before the kernel waits for its inputs (PDL), so the weight stream starts under the previous
// launch's tail. RMS-norm, bias, residual add, SwiGLU and the bf16-activation roundings as linear.cu.
// The RMS of an input row is summed as dev::warp_sum_squares sums it, the order of linear's
// single-row kernel and of the persistent stack, so the quantised stack's two decode paths agree
// bit for bit.
//
// Tensor-core path (many rows): each matrix is dequantised into bf16 high and low parts in the
// workspace right before its products (dequantize_split); linear.cu then runs its cuBLAS path on
// the high part and adds the low part's product. Chosen over a kernel that dequantises tiles on the
// fly for simplicity: it reuses the tested split-input GEMM, at the cost of writing and reading the
// 4 bytes per weight of the two parts each call (the path serves prefill and large batches, which
// are compute-bound; the single-stream decode never takes it).
#include <cuda_bf16.h>

#include <algorithm>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/linear_quant.h"
#include "runtime/cuda/quant_util.cuh"

namespace chorus::cuda::detail {

namespace {

using dev::kCodeChunk;
using dev::kCodeStride;

constexpr int kWarps = 8;  // per block
constexpr int kPre = 4;    // chunks per lane loaded before the PDL wait
constexpr int kBatch = 4;  // chunks per lane loaded together after them

struct QSeg {
  const uint8_t* codes;
  const uint16_t* scales;
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t n;
};

struct QParams {
  const float* x;
  int64_t ldx, M, K, G;  // G: scale groups per row
  const float* norm_w;
  float eps;
  QSeg seg[3];
  int nseg;
  int64_t rows_total;  // features computed (for SwiGLU: the gate's rows)
  bool bf16, round_out;
  L2Prefetch prefetch[4];
};

__device__ __forceinline__ void issue_prefetch(const QParams& p) {
  if (threadIdx.x != 0 || blockIdx.y != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) dev::prefetch_l2_share(p.prefetch[i].ptr, p.prefetch[i].bytes, blockIdx.x, gridDim.x);
}

// The 16 inputs x[k..k+16) of a row, RMS-normed when the launch has a norm.
__device__ __forceinline__ void load_x16(const QParams& p, const float* xr, int64_t k, float inv, float (&v)[16]) {
  float a[8], b[8];
  dev::load_x8(xr, k, p.norm_w, inv, p.bf16, a);
  dev::load_x8(xr, k + 8, p.norm_w, inv, p.bf16, b);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    v[j] = a[j];
    v[8 + j] = b[j];
  }
}

// One and two rows (single-stream decode, guidance's two branches): at most 128 registers, so two
// blocks (16 warps of loads in flight) fit an SM; left to itself ptxas gave the single-row int8
// kernel 80 registers and a spill.
template <int MT, int EPI, int QF>
__global__ void __launch_bounds__(kWarps * 32, MT <= 2 ? 2 : 1) gemvq_kernel(QParams p) {
  constexpr int NW = EPI == 2 ? 2 : 1;
  __shared__ float inv_s[MT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * MT;
  const int64_t feature = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool valid = feature < p.rows_total;
  const int64_t K = p.K;

  // Which weight row(s) this warp reads; then their first chunks, before waiting for the inputs.
  int si = 0;
  int64_t n = valid ? feature : 0;
  if (EPI != 2)
    while (si + 1 < p.nseg && n >= p.seg[si].n) {
      n -= p.seg[si].n;
      ++si;
    }
  const uint8_t* codes[NW];
  const uint16_t* scales[NW];
#pragma unroll
  for (int r = 0; r < NW; ++r) {
    const QSeg& sg = p.seg[NW == 2 ? r : si];
    codes[r] = sg.codes + n * K;
    scales[r] = sg.scales + n * p.G;
  }
  const uint64_t pol = dev::weight_l2_policy();
  uint4 pre[NW][kPre];
  uint16_t pre_s[NW][kPre];
#pragma unroll
  for (int r = 0; r < NW; ++r)
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      const int64_t k = lane * kCodeChunk + kCodeStride * i;
      const bool in = valid && k < K;
      pre[r][i] = in ? dev::load_codes(codes[r] + k, pol) : make_uint4(0, 0, 0, 0);
      pre_s[r][i] = in ? __ldg(scales[r] + (k >> 5)) : uint16_t{0};
    }
  issue_prefetch(p);
  dev::pdl_wait();

  // 1 / RMS of the input rows: a single row by every warp itself (no block barrier on the decode
  // path), several rows one warp each, shared.
  float inv[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) inv[m] = 1.0f;
  if (p.norm_w) {
    if constexpr (MT == 1) {
      inv[0] = dev::inv_rms(dev::warp_sum_squares(p.x + m0 * p.ldx, K), K, p.eps, p.bf16);
    } else {
      for (int m = warp; m < MT; m += kWarps) {
        const double ss = dev::warp_sum_squares(p.x + min(m0 + m, p.M - 1) * p.ldx, K);
        if (lane == 0) inv_s[m] = dev::inv_rms(ss, K, p.eps, p.bf16);
      }
      __syncthreads();
#pragma unroll
      for (int m = 0; m < MT; ++m) inv[m] = inv_s[m];
    }
  }
  if (!valid) return;

  const float* xr[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) xr[m] = p.x + min(m0 + m, p.M - 1) * p.ldx;
  float acc[NW][MT];
#pragma unroll
  for (int r = 0; r < NW; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;
  auto step = [&](int64_t k, const uint4 (&cv)[NW], const uint16_t (&sv)[NW]) {
    float w[NW][16];
#pragma unroll
    for (int r = 0; r < NW; ++r) dev::dequant16<QF>(cv[r], dev::f16_bits_to_f32(sv[r]), w[r]);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      float xv[16];
      load_x16(p, xr[m], k, inv[m], xv);
#pragma unroll
      for (int r = 0; r < NW; ++r)
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[r][m] = fmaf(w[r][j], xv[j], acc[r][m]);
    }
  };
#pragma unroll
  for (int i = 0; i < kPre; ++i) {
    const int64_t k = lane * kCodeChunk + kCodeStride * i;
    if (k < K) {
      uint4 cv[NW];
      uint16_t sv[NW];
#pragma unroll
      for (int r = 0; r < NW; ++r) {
        cv[r] = pre[r][i];
        sv[r] = pre_s[r][i];
      }
      step(k, cv, sv);
    }
  }
  // The rest in batches of kBatch chunks, all loaded before the first is used (the same k order).
  for (int64_t k0 = lane * kCodeChunk + kCodeStride * kPre; k0 < K; k0 += kCodeStride * kBatch) {
    uint4 cv[kBatch][NW];
    uint16_t sv[kBatch][NW];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t k = k0 + kCodeStride * b;
#pragma unroll
      for (int r = 0; r < NW; ++r) {
        cv[b][r] = k < K ? dev::load_codes(codes[r] + k, pol) : make_uint4(0, 0, 0, 0);
        sv[b][r] = k < K ? __ldg(scales[r] + (k >> 5)) : uint16_t{0};
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (k0 + kCodeStride * b < K) step(k0 + kCodeStride * b, cv[b], sv[b]);
  }
#pragma unroll
  for (int r = 0; r < NW; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = dev::warp_sum(acc[r][m]);
  if (lane != 0) return;
  if constexpr (EPI == 2) {  // SwiGLU
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m0 + m >= p.M) break;
      const float g = acc[0][m] + (p.seg[0].bias ? p.seg[0].bias[n] : 0.0f);
      const float u = acc[1][m] + (p.seg[1].bias ? p.seg[1].bias[n] : 0.0f);
      p.seg[0].y[(m0 + m) * p.seg[0].ldy + n] = dev::swiglu_out(g, u, p.bf16);
    }
  } else {
    const QSeg& sg = p.seg[si];
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m0 + m >= p.M) break;
      const float v = sg.bias ? acc[0][m] + sg.bias[n] : acc[0][m];
      dev::store_out(sg.y + (m0 + m) * sg.ldy + n, v, EPI, p.bf16 && p.round_out);
    }
  }
}

template <int MT, int QF>
cudaError_t launch_tile(const QParams& p, int epi, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.rows_total + kWarps - 1) / kWarps), static_cast<unsigned>((p.M + MT - 1) / MT));
  const dim3 block(kWarps * 32);
  if (epi == 0) return launch(gemvq_kernel<MT, 0, QF>, grid, block, 0, s, p);
  if (epi == 1) return launch(gemvq_kernel<MT, 1, QF>, grid, block, 0, s, p);
  return launch(gemvq_kernel<MT, 2, QF>, grid, block, 0, s, p);
}

template <int QF>
cudaError_t launch_gemvq(const QParams& p, int epi, cudaStream_t s) {
  if (p.M == 1) return launch_tile<1, QF>(p, epi, s);
  if (p.M == 2) return launch_tile<2, QF>(p, epi, s);
  if (p.M <= 4) return launch_tile<4, QF>(p, epi, s);
  return launch_tile<8, QF>(p, epi, s);
}

// hi/lo split of a dequantised matrix, 16 weights per thread and step (cols % 16 == 0).
template <int QF>
__global__ void dequant_split_kernel(const uint8_t* codes, const uint16_t* scales, int64_t rows, int64_t cols, int64_t G,
                                     __nv_bfloat16* hi, __nv_bfloat16* lo) {
  dev::pdl_wait();  // the scratch may still be read by the products of the previous matrix
  const int64_t chunks = rows * cols / kCodeChunk;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < chunks;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * kCodeChunk, r = e / cols, c = e - r * cols;
    float w[16];
    dev::dequant16<QF>(*reinterpret_cast<const uint4*>(codes + e), dev::f16_bits_to_f32(scales[r * G + (c >> 5)]), w);
    uint32_t h[8], l[8];  // bf16 pairs, the first in the low half
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t hp[2], lp[2];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const __nv_bfloat16 b = __float2bfloat16_rn(w[2 * j + t]);
        hp[t] = __bfloat16_as_ushort(b);
        lp[t] = __bfloat16_as_ushort(__float2bfloat16_rn(w[2 * j + t] - __bfloat162float(b)));
      }
      h[j] = hp[0] | (hp[1] << 16);
      l[j] = lp[0] | (lp[1] << 16);
    }
    auto* hv = reinterpret_cast<uint4*>(hi + e);
    auto* lv = reinterpret_cast<uint4*>(lo + e);
    hv[0] = make_uint4(h[0], h[1], h[2], h[3]);
    hv[1] = make_uint4(h[4], h[5], h[6], h[7]);
    lv[0] = make_uint4(l[0], l[1], l[2], l[3]);
    lv[1] = make_uint4(l[4], l[5], l[6], l[7]);
  }
}

}  // namespace

const char* quant_args_problem(const LinearArgs& a) {
  const cpu::WeightFormat f = a.out[0].w.format;
  if (f != cpu::WeightFormat::kInt8 && f != cpu::WeightFormat::kFp8) return "quantised matrices must be int8 or fp8";
  for (int i = 0; i < a.outputs; ++i) {
    const DeviceMatrix& w = a.out[i].w;
    if (w.format != f || !w.codes || !w.scales) return "every output needs codes and scales of one format";
    if (w.cols % kCodeChunk != 0 || !aligned16(w.codes)) return "quantised matrices need cols a multiple of 16";
  }
  if (a.ldx % 4 != 0 || !aligned16(a.x) || (a.norm_weight && !aligned16(a.norm_weight)))
    return "quantised matrices need 16-byte aligned inputs";
  return "";
}

Status gemv_quant(const LinearArgs& a, cudaStream_t s) {
  QParams p{};
  p.x = a.x;
  p.ldx = a.ldx;
  p.M = a.M;
  p.K = a.out[0].w.cols;
  p.G = (p.K + 31) / 32;
  p.norm_w = a.norm_weight;
  p.eps = a.norm_eps;
  p.nseg = a.outputs;
  p.bf16 = a.bf16;
  p.round_out = a.round_outputs;
  for (int i = 0; i < 4; ++i) p.prefetch[i] = a.prefetch[i];
  for (int i = 0; i < a.outputs; ++i) {
    const LinearOut& o = a.out[i];
    p.seg[i] = {o.w.codes, o.w.scales, o.bias, o.y, o.ldy, o.w.rows};
    p.rows_total += o.w.rows;
  }
  const int epi = a.epilogue == Epilogue::kStore ? 0 : a.epilogue == Epilogue::kAdd ? 1 : 2;
  if (epi == 2) p.rows_total = a.out[0].w.rows;
  const bool fp8 = a.out[0].w.format == cpu::WeightFormat::kFp8;
  CHORUS_CUDA_TRY(fp8 ? launch_gemvq<dev::kQFp8>(p, epi, s) : launch_gemvq<dev::kQInt8>(p, epi, s));
  return ok_status();
}

Status dequantize_split(const DeviceMatrix& w, uint16_t* hi, uint16_t* lo, cudaStream_t s) {
  const int64_t chunks = w.rows * w.cols / kCodeChunk, G = (w.cols + 31) / 32;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((chunks + 255) / 256, 4096));
  auto* h = reinterpret_cast<__nv_bfloat16*>(hi);
  auto* l = reinterpret_cast<__nv_bfloat16*>(lo);
  if (w.format == cpu::WeightFormat::kFp8) {
    CHORUS_CUDA_TRY(launch(dequant_split_kernel<dev::kQFp8>, dim3(blocks), dim3(256), 0, s, w.codes, w.scales, w.rows,
                           w.cols, G, h, l));
  } else {
    CHORUS_CUDA_TRY(launch(dequant_split_kernel<dev::kQInt8>, dim3(blocks), dim3(256), 0, s, w.codes, w.scales, w.rows,
                           w.cols, G, h, l));
  }
  return ok_status();
}

}  // namespace chorus::cuda::detail
