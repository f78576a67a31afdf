// linear's tensor-core path for bf16 matrices: Y = W · X̂ with X̂ split as hi + lo (two bf16 parts,
// split_rows_kernel in linear.cu), on mma.sync.m16n8k16, with the bias, residual add or SwiGLU in
// the epilogue.
//
// What an output (row m, feature f) is, whatever M, the tiles and the launch: K is cut into chunks of
// kChunk; within a chunk, steps of 32 k in order, each two mma on the same 16-k slot assignment
// (lane group t takes k + 8t .. k + 8t + 7: slots 2t, 2t+1 ← k, k+1 and 2t+8, 2t+9 ← k+2, k+3 for
// the first mma, the next four for the second) into a high and a low accumulator that start at
// zero; the chunk's value is high + low, and the chunk values are added left to right. (With a
// third input part, few-row launches in the default mode: a third accumulator, and the chunk's
// value is high + (low + third).) An mma
// computes each of its elements from that element's row and column alone, so a row's results do not
// depend on which rows share the launch, where the row sits in a tile, or whether a warp walks all
// chunks or one (then a reduce kernel adds the chunk values in the same order). That is what lets a
// stream's codes stay the same when it joins a batch of any size.
#include <cuda_bf16.h>

#include <algorithm>

#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/linear_tensor.h"

namespace chorus::cuda::detail {

namespace {

constexpr int kWarps = 4;            // warps per block, 16 features each
constexpr int kBlockFeatures = 16 * kWarps;

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 load16(const uint16_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// One 32-k step of one accumulator: lane group t's 16 bytes of the two weight rows (wa: feature g,
// wb: g + 8) and of the input row (b), k + 8t .. k + 8t + 7, into the two mma as the contract above
// assigns them.
__device__ __forceinline__ void mma_step(float (&d)[4], const uint4& wa, const uint4& wb, const uint4& b) {
  mma(d, wa.x, wb.x, wa.y, wb.y, b.x, b.y);
  mma(d, wa.z, wb.z, wa.w, wb.w, b.z, b.w);
}

// Which segment feature f (of the concatenated outputs) belongs to, and its row in that segment.
__device__ __forceinline__ int segment_of(const TensorLinearArgs& p, int64_t& f) {
  int si = 0;
  while (si + 1 < p.nseg && f >= p.seg[si].n) {
    f -= p.seg[si].n;
    ++si;
  }
  return si;
}

// The epilogue of one output: v (and u, SwiGLU's up value) are the chunk sums without the bias.
__device__ __forceinline__ void emit(const TensorLinearArgs& p, int64_t m, int64_t f, float v, float u) {
  if (p.epi == 2) {
    const float g = v + (p.seg[0].bias ? p.seg[0].bias[f] : 0.0f);
    const float w = u + (p.seg[1].bias ? p.seg[1].bias[f] : 0.0f);
    p.seg[0].y[m * p.seg[0].ldy + f] = dev::swiglu_out(g, w, p.bf16);
    return;
  }
  int64_t n = f;
  const TensorSeg& sg = p.seg[segment_of(p, n)];
  if (sg.bias) v += sg.bias[n];
  dev::store_out(sg.y + m * sg.ldy + n, v, p.epi, p.bf16 && p.round_out);
}

// A warp: 16 features × 8·NR rows; NW weight matrices (2: SwiGLU's gate and up) against the same
// inputs; LO: the inputs have a low part (false in the bf16-activation mode, where it is zero).
// SPLIT: the block takes one chunk (blockIdx.z) and stores its values for tensor_reduce_kernel.
// LO2: the inputs have a third part (p.xlo2; NR 1 only).
template <int NR, int NW, bool LO, bool SPLIT, bool LO2 = false>
__global__ void __launch_bounds__(kWarps * 32) tensor_linear_kernel(TensorLinearArgs p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 8 * NR;
  const int64_t f0 = static_cast<int64_t>(blockIdx.y) * kBlockFeatures + warp * 16;
  const int64_t K = p.K;
  const uint16_t* w[NW][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t n = min(f0 + g + 8 * h, p.features - 1);
    const int si = NW == 2 ? 0 : segment_of(p, n);
#pragma unroll
    for (int j = 0; j < NW; ++j) w[j][h] = p.seg[NW == 2 ? j : si].w + n * K;
  }
  const uint16_t* xh[NR];
  const uint16_t* xl[NR];
  const uint16_t* xl2[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    const int64_t m = min(r0 + 8 * r + g, p.M - 1);
    xh[r] = p.xhi + m * K;
    xl[r] = p.xlo + m * K;
    xl2[r] = LO2 ? p.xlo2 + m * K : nullptr;
  }
  dev::pdl_wait();
  if (f0 >= p.features) return;

  const int n_chunks = static_cast<int>((K + kTensorChunk - 1) / kTensorChunk);
  const int c_begin = SPLIT ? static_cast<int>(blockIdx.z) : 0;
  const int c_end = SPLIT ? c_begin + 1 : n_chunks;
  float tot[NW][NR][4];
  for (int c = c_begin; c < c_end; ++c) {
    float hi[NW][NR][4], lo[NW][NR][4], lo2[NW][NR][4];
#pragma unroll
    for (int j = 0; j < NW; ++j)
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) hi[j][r][i] = lo[j][r][i] = lo2[j][r][i] = 0.0f;
    const int64_t k_end = min(K, static_cast<int64_t>(c + 1) * kTensorChunk);
#pragma unroll 2
    for (int64_t k0 = static_cast<int64_t>(c) * kTensorChunk; k0 < k_end; k0 += 32) {
      const int64_t k = k0 + 8 * t;
      const bool in = k < K;  // K is a multiple of 8: a group is wholly inside or outside
      const uint4 zero = make_uint4(0, 0, 0, 0);
      uint4 wa[NW], wb[NW];
#pragma unroll
      for (int j = 0; j < NW; ++j) {
        wa[j] = in ? load16(w[j][0] + k) : zero;
        wb[j] = in ? load16(w[j][1] + k) : zero;
      }
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        const uint4 bh = in ? load16(xh[r] + k) : zero;
        uint4 bl = zero, bl2 = zero;
        if constexpr (LO) bl = in ? load16(xl[r] + k) : zero;
        if constexpr (LO2) bl2 = in ? load16(xl2[r] + k) : zero;
#pragma unroll
        for (int j = 0; j < NW; ++j) {
          mma_step(hi[j][r], wa[j], wb[j], bh);
          if constexpr (LO) mma_step(lo[j][r], wa[j], wb[j], bl);
          if constexpr (LO2) mma_step(lo2[j][r], wa[j], wb[j], bl2);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NW; ++j)
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float v = LO2 ? hi[j][r][i] + (lo[j][r][i] + lo2[j][r][i])
                          : LO ? hi[j][r][i] + lo[j][r][i]
                               : hi[j][r][i];
          tot[j][r][i] = c == c_begin ? v : tot[j][r][i] + v;
        }
  }

  // c[i] of a 16 × 8 tile: feature g + 8·(i >> 1), row 2t + (i & 1).
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t f = f0 + g + 8 * (i >> 1);
      const int64_t m = r0 + 8 * r + 2 * t + (i & 1);
      if (f >= p.features || m >= p.M) continue;
      if constexpr (SPLIT) {
        float* out = p.partial + (static_cast<int64_t>(blockIdx.z) * p.M + m) * (NW * p.features);
#pragma unroll
        for (int j = 0; j < NW; ++j) out[j * p.features + f] = tot[j][r][i];
      } else {
        emit(p, m, f, tot[0][r][i], tot[NW - 1][r][i]);
      }
    }
}

// The chunk values of each output added left to right, then the epilogue.
__global__ void tensor_reduce_kernel(TensorLinearArgs p, int nw, int n_chunks) {
  dev::pdl_wait();
  const int64_t m = blockIdx.y;
  const int64_t width = nw * p.features;
  for (int64_t f = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; f < p.features;
       f += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* col = p.partial + m * width + f;
    float v = col[0], u = nw == 2 ? col[p.features] : 0.0f;
    for (int c = 1; c < n_chunks; ++c) {
      const float* at = col + static_cast<int64_t>(c) * p.M * width;
      v += at[0];
      if (nw == 2) u += at[p.features];
    }
    emit(p, m, f, v, u);
  }
}

// ---- many rows: block tiles staged through shared memory ----
// Launches of more than kTensorSplitRows rows: each block stages 64 features (of each of its NW
// matrices) and 16·RT rows of the inputs through shared memory, 64 k at a time, with cp.async
// (kTiledStages in flight), and its 8 warps (4 along the features, 2 along the rows) read their
// fragments from there with the same 16-byte loads tensor_linear_kernel makes from global memory:
// the same operands in the same mma slots, the same mma order in each accumulator and the same
// chunk sums, so the same bits for every output; the operands are read from memory once per block
// instead of once per warp.
constexpr int kTiledStages = 3;
constexpr int kTiledK = 64;  // k per stage: two 32-k steps
constexpr int kTiledFeatures = 64;

// bf16 element (row, k) of a stage tile of 64-k rows: 16-byte chunk k / 8, with the halves of odd
// rows swapped, so the two rows a quarter-warp reads (g and g + 1, the same chunks) fall in
// different banks.
__device__ __forceinline__ int tiled_at(int row, int k) {
  return row * kTiledK + (((k >> 3) ^ ((row & 1) << 2)) << 3) + (k & 7);
}

__device__ __forceinline__ uint4 lds16(const uint16_t* p) { return *reinterpret_cast<const uint4*>(p); }

template <int RT, int NW>
struct TiledWarp {
  static constexpr int BR = 16 * RT;                 // rows per block
  static constexpr int WROWS = NW * kTiledFeatures;  // weight rows of a stage
  float hi[NW][RT][4], lo[NW][RT][4], tot[NW][RT][4];
  int tid, wf, wr, g, t;
  int64_t fb, rb;  // the block's first feature and row

  __device__ TiledWarp() {
    tid = static_cast<int>(threadIdx.x);
    const int warp = tid >> 5, lane = tid & 31;
    g = lane >> 2;
    t = lane & 3;
    wf = warp & 3;
    wr = warp >> 2;
    fb = static_cast<int64_t>(blockIdx.y) * kTiledFeatures;
    rb = static_cast<int64_t>(blockIdx.x) * BR;
#pragma unroll
    for (int a = 0; a < NW; ++a)
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) hi[a][r][i] = lo[a][r][i] = tot[a][r][i] = 0.0f;
  }

  // This thread's weight copies each stage: chunk tid & 7 of weight rows tid/8 + 32i (null past
  // the features: zero-filled).
  static constexpr int WCOPIES = WROWS / 32;
  __device__ void weight_rows(const TensorLinearArgs& p, const uint16_t* (&w)[WCOPIES]) const {
#pragma unroll
    for (int i = 0; i < WCOPIES; ++i) {
      const int row = (tid >> 3) + 32 * i;
      int64_t n = fb + row % kTiledFeatures;
      w[i] = nullptr;
      if (n < p.features) {
        const int si = NW == 2 ? row / kTiledFeatures : segment_of(p, n);
        w[i] = p.seg[si].w + n * p.K;
      }
    }
  }
  __device__ void copy_weights(const TensorLinearArgs& p, const uint16_t* const (&w)[WCOPIES], uint16_t* st,
                               int64_t k0) const {
    const int c = tid & 7;
    const int64_t k = k0 + 8 * c;
#pragma unroll
    for (int i = 0; i < WCOPIES; ++i) {
      const bool ok = k < p.K && w[i];  // K is a multiple of 8: a chunk is wholly inside or outside
      dev::cp_async16(st + tiled_at((tid >> 3) + 32 * i, 8 * c), ok ? w[i] + k : p.seg[0].w, ok ? 16 : 0);
    }
  }

  // The mma of one stage (w: its weight tile, xh / xl: its input parts, BR rows), its 32-k steps up
  // to K as tensor_linear_kernel's, then the chunk's end when a chunk ends with the stage.
  template <bool LO>
  __device__ void stage(const uint16_t* w, const uint16_t* xh, const uint16_t* xl, int s, int n_stages, int64_t K) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (static_cast<int64_t>(s) * kTiledK + 32 * h >= K) break;
      const int k = 32 * h + 8 * t;
      uint4 wa[NW], wb[NW];
#pragma unroll
      for (int a = 0; a < NW; ++a) {
        const int row = a * kTiledFeatures + wf * 16 + g;
        wa[a] = lds16(w + tiled_at(row, k));
        wb[a] = lds16(w + tiled_at(row + 8, k));
      }
#pragma unroll
      for (int r = 0; r < RT; ++r) {
        const int row = wr * 8 * RT + 8 * r + g;
        const uint4 bh = lds16(xh + tiled_at(row, k));
        uint4 bl = make_uint4(0, 0, 0, 0);
        if constexpr (LO) bl = lds16(xl + tiled_at(row, k));
#pragma unroll
        for (int a = 0; a < NW; ++a) {
          mma_step(hi[a][r], wa[a], wb[a], bh);
          if constexpr (LO) mma_step(lo[a][r], wa[a], wb[a], bl);
        }
      }
    }
    constexpr int kStagesPerChunk = static_cast<int>(kTensorChunk / kTiledK);
    if ((s + 1) % kStagesPerChunk != 0 && s + 1 != n_stages) return;
    const bool first = s < kStagesPerChunk;
#pragma unroll
    for (int a = 0; a < NW; ++a)
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float v = LO ? hi[a][r][i] + lo[a][r][i] : hi[a][r][i];
          tot[a][r][i] = first ? v : tot[a][r][i] + v;
          hi[a][r][i] = lo[a][r][i] = 0.0f;
        }
  }

  // c[i] of a 16 × 8 tile: feature g + 8·(i >> 1), row 2t + (i & 1).
  __device__ void emit_all(const TensorLinearArgs& p) const {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t f = fb + wf * 16 + g + 8 * (i >> 1);
        const int64_t m = rb + wr * 8 * RT + 8 * r + 2 * t + (i & 1);
        if (f < p.features && m < p.M) emit(p, m, f, tot[0][r][i], tot[NW - 1][r][i]);
      }
  }
};

template <int RT, int NW, bool LO>
constexpr size_t tiled_smem_bytes() {
  return static_cast<size_t>(kTiledStages) * (NW * kTiledFeatures + (LO ? 2 : 1) * 16 * RT) * kTiledK * sizeof(uint16_t);
}

// Over the inputs split by linear.cu (p.xhi, p.xlo).
template <int RT, int NW, bool LO>
__global__ void __launch_bounds__(256, 2) tensor_tiled_kernel(TensorLinearArgs p) {
  using W = TiledWarp<RT, NW>;
  constexpr int STAGE = (W::WROWS + (LO ? 2 : 1) * W::BR) * kTiledK;
  extern __shared__ __align__(16) uint16_t smem[];
  W w;
  const uint16_t* wsrc[W::WCOPIES];
  w.weight_rows(p, wsrc);
  // This thread's input copies: chunk tid & 7 of rows tid/8 + 32i (−1 past the block or M).
  constexpr int XCOPIES = (W::BR + 31) / 32;
  int64_t xoff[XCOPIES];
#pragma unroll
  for (int i = 0; i < XCOPIES; ++i) {
    const int row = (w.tid >> 3) + 32 * i;
    xoff[i] = row < W::BR && w.rb + row < p.M ? (w.rb + row) * p.K : -1;
  }
  const int n_stages = static_cast<int>((p.K + kTiledK - 1) / kTiledK);
  auto issue = [&](int s) {
    uint16_t* st = smem + (s % kTiledStages) * STAGE;
    const int64_t k0 = static_cast<int64_t>(s) * kTiledK;
    w.copy_weights(p, wsrc, st, k0);
    const int c = w.tid & 7;
    const int64_t k = k0 + 8 * c;
#pragma unroll
    for (int i = 0; i < XCOPIES; ++i) {
      const int row = (w.tid >> 3) + 32 * i;
      if (row >= W::BR) continue;
      const bool ok = k < p.K && xoff[i] >= 0;
      const int64_t off = ok ? xoff[i] + k : 0;
      dev::cp_async16(st + (W::WROWS * kTiledK) + tiled_at(row, 8 * c), p.xhi + off, ok ? 16 : 0);
      if constexpr (LO)
        dev::cp_async16(st + (W::WROWS + W::BR) * kTiledK + tiled_at(row, 8 * c), p.xlo + off, ok ? 16 : 0);
    }
  };
  dev::pdl_wait();
#pragma unroll
  for (int s = 0; s < kTiledStages - 1; ++s) {
    if (s < n_stages) issue(s);
    dev::cp_async_commit();
  }
  for (int s = 0; s < n_stages; ++s) {
    dev::cp_async_wait<kTiledStages - 2>();
    __syncthreads();
    if (s + kTiledStages - 1 < n_stages) issue(s + kTiledStages - 1);
    dev::cp_async_commit();
    const uint16_t* st = smem + (s % kTiledStages) * STAGE;
    w.template stage<LO>(st, st + W::WROWS * kTiledK, st + (W::WROWS + W::BR) * kTiledK, s, n_stages, p.K);
  }
  dev::cp_async_wait<0>();
  w.emit_all(p);
}

template <int RT, int NW, bool LO>
cudaError_t launch_tiled(const TensorLinearArgs& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.M + 16 * RT - 1) / (16 * RT)),
                  static_cast<unsigned>((p.features + kTiledFeatures - 1) / kTiledFeatures));
  constexpr size_t bytes = tiled_smem_bytes<RT, NW, LO>();
  static const cudaError_t attr = cudaFuncSetAttribute(tensor_tiled_kernel<RT, NW, LO>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (attr != cudaSuccess) return attr;
  return launch(tensor_tiled_kernel<RT, NW, LO>, grid, dim3(256), bytes, s, p);
}

// Rows per block: the most (fewest reloads of the weights) that still give every SM a block; two
// matrices (SwiGLU) hold twice the accumulators, so at most 32.
template <int NW, bool LO>
cudaError_t launch_tiled_rows(const TensorLinearArgs& p, cudaStream_t s) {
  const int64_t fblocks = (p.features + kTiledFeatures - 1) / kTiledFeatures, sms = sm_count();
  const auto blocks = [&](int64_t rows) { return (p.M + rows - 1) / rows * fblocks; };
  if constexpr (NW == 1)
    if (blocks(64) >= sms) return launch_tiled<4, NW, LO>(p, s);
  if (blocks(32) >= sms) return launch_tiled<2, NW, LO>(p, s);
  return launch_tiled<1, NW, LO>(p, s);
}

template <int NR, int NW, bool LO, bool LO2 = false>
cudaError_t launch_rows(const TensorLinearArgs& p, bool split, int n_chunks, cudaStream_t s) {
  const dim3 block(kWarps * 32);
  const auto row_tiles = static_cast<unsigned>((p.M + 8 * NR - 1) / (8 * NR));
  const auto feature_blocks = static_cast<unsigned>((p.features + kBlockFeatures - 1) / kBlockFeatures);
  if (!split)
    return launch(tensor_linear_kernel<NR, NW, LO, false, LO2>, dim3(row_tiles, feature_blocks), block, 0, s, p);
  const cudaError_t e = launch(tensor_linear_kernel<NR, NW, LO, true, LO2>,
                               dim3(row_tiles, feature_blocks, static_cast<unsigned>(n_chunks)), block, 0, s, p);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((p.features + 255) / 256, 64)), static_cast<unsigned>(p.M));
  return launch(tensor_reduce_kernel, grid, dim3(256), 0, s, p, NW, n_chunks);
}

// A warp's tile: 8 rows per NR, as few as M needs up to 32.
int tile_nr(int64_t M) { return M <= 8 ? 1 : M <= 16 ? 2 : 4; }

template <int NW, bool LO>
cudaError_t launch_nw(const TensorLinearArgs& p, bool split, int n_chunks, cudaStream_t s) {
  switch (tile_nr(p.M)) {
    case 1: return launch_rows<1, NW, LO>(p, split, n_chunks, s);
    case 2: return launch_rows<2, NW, LO>(p, split, n_chunks, s);
    default: return launch_rows<4, NW, LO>(p, split, n_chunks, s);
  }
}

}  // namespace

int64_t tensor_linear_partial_floats(int64_t max_rows, int64_t max_k, int64_t max_n_total) {
  const int64_t chunks = (max_k + kTensorChunk - 1) / kTensorChunk;
  return std::min(max_rows, kTensorSplitRows) * chunks * max_n_total;
}

cudaError_t tensor_linear(const TensorLinearArgs& p, int64_t partial_floats, cudaStream_t s) {
  const int nw = p.epi == 2 ? 2 : 1;
  if (p.xlo2 && (p.lo_zero || p.M > kTensorThreePartRows)) return cudaErrorInvalidValue;
  const int n_chunks = static_cast<int>((p.K + kTensorChunk - 1) / kTensorChunk);
  // A launch of few rows has few warps if each walks all of K; splitting the chunks over blocks
  // fills the GPU (same results: the reduce adds the chunk values in the same order).
  const int64_t nr = tile_nr(p.M);
  const int64_t warps = (p.features + 15) / 16 * ((p.M + 8 * nr - 1) / (8 * nr));
  const bool split = n_chunks > 1 && p.M <= kTensorSplitRows && warps < 4 * sm_count() && p.partial &&
                     p.M * n_chunks * nw * p.features <= partial_floats;
  if (!p.xlo2 && p.M > kTensorSplitRows) {
    if (nw == 2) return p.lo_zero ? launch_tiled_rows<2, false>(p, s) : launch_tiled_rows<2, true>(p, s);
    return p.lo_zero ? launch_tiled_rows<1, false>(p, s) : launch_tiled_rows<1, true>(p, s);
  }
  if (p.xlo2) {  // at most 8 rows: one row tile
    if (nw == 2) return launch_rows<1, 2, true, true>(p, split, n_chunks, s);
    return launch_rows<1, 1, true, true>(p, split, n_chunks, s);
  }
  if (nw == 2) return p.lo_zero ? launch_nw<2, false>(p, split, n_chunks, s) : launch_nw<2, true>(p, split, n_chunks, s);
  return p.lo_zero ? launch_nw<1, false>(p, split, n_chunks, s) : launch_nw<1, true>(p, split, n_chunks, s);
}

}  // namespace chorus::cuda::detail
