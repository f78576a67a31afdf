// The tiles of the codec GEMM's tensor-core kernels (codec_gemm.cu), as functions of one thread or
// one lane: the kernels call them, and the CPU tests (tests/runtime/codec_gemm_emulation_test.cpp)
// run them over every thread of every block with the mma emulated, so that the staging of A and B
// in shared memory, the fragment indexing, the k-step counts and the stores are checked on machines
// without a GPU. The arithmetic of an element is codec_elements.h's (3xTF32, fixed k-steps); only
// the warp-wide mma and cp.async are device code (codec_gemm.cu).
//
// A block computes a BM × BN tile of C for one K chunk with WM × WN warps, each warp a
// (BM / WM) × (BN / WN) tile as MT × NT mma tiles of 16 × 8. K goes through shared memory in stages
// of BK k (kStages of them in flight), each stage holding A's and B's tiles with their rows as
// stored in global memory, padded so that fragment reads hit 32 distinct banks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime/cuda/codec_elements.h"

namespace chorus::cuda::codec_ops {

// ---- TF32 rounding and the 3xTF32 split ---------------------------------------------------------

CHORUS_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

CHORUS_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// cvt.rna.tf32.f32: x to 10 explicit mantissa bits, nearest with ties away from zero (a carry into
// bit 13 of the magnitude), the low 13 bits cleared; infinities and NaNs are only cleared. The host
// branch is that definition, for tests.
CHORUS_HD float tf32_round(float x) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
#else
  uint32_t u = f32_bits(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
  return f32_from_bits(u & 0xffffe000u);
#endif
}

// x = hi + lo + O(2^-22·|x|): hi = tf32(x), lo = tf32(x − hi) (x − hi is exact in f32).
CHORUS_HD void tf32_split(float x, float& hi, float& lo) {
  hi = tf32_round(x);
  lo = tf32_round(sub_rn(x, hi));
}

// ---- fragments of mma.m16n8k8 with .tf32 operands (PTX ISA, "Matrix Fragments for mma.m16n8k8") --
// Lane l = 4·g + t (g = l / 4 its group, t = l % 4 its place in the group) holds
//   A (16 × 8, row):    a[i], i < 4, at row g + 8·(i & 1),  column (k) t + 4·(i >> 1)
//   B (8 × 8, column):  b[i], i < 2, at row (k) t + 4·i,    column g
//   C, D (16 × 8):      c[i], i < 4, at row g + 8·(i >> 1), column 2·t + (i & 1)
CHORUS_HD void mma_a_at(int lane, int i, int& row, int& k) {
  row = (lane >> 2) + 8 * (i & 1);
  k = (lane & 3) + 4 * (i >> 1);
}
CHORUS_HD void mma_b_at(int lane, int i, int& k, int& col) {
  k = (lane & 3) + 4 * i;
  col = lane >> 2;
}
CHORUS_HD void mma_c_at(int lane, int i, int& row, int& col) {
  row = (lane >> 2) + 8 * (i >> 1);
  col = 2 * (lane & 3) + (i & 1);
}

// ---- tile shapes ------------------------------------------------------------------------------

template <int BM_, int BN_, int WM_, int WN_, int BK_, int STAGES_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, BK = BK_, kStages = STAGES_;
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kWarpRows = BM / WM, kWarpCols = BN / WN;
  static constexpr int MT = kWarpRows / 16, NT = kWarpCols / 8;
  static constexpr int kSteps = BK / kGemmKStep;
  static_assert(MT * 16 * WM == BM && NT * 8 * WN == BN, "warps must tile the block with 16 × 8 mma tiles");
  static_assert(BK % kGemmKStep == 0 && kGemmKChunk % BK == 0, "chunks must start on a stage boundary");
  static_assert(kStages >= 2, "the pipeline needs two stages at least");
};

// Large problems: 8 warps of 64 × 32.
using GemmLarge = MmaTile<128, 128, 2, 4, 32, 3>;
// When the large tiles would not fill the GPU: 4 warps of 32 × 32.
using GemmSmall = MmaTile<64, 64, 2, 2, 32, 3>;
// Few columns (a few streams' one step) or few rows (the transformer's rows of one frame): one warp
// of 16 rows by 8, 16 or 32 columns, so that the grid has as many blocks as the rows (and the
// columns, and the chunks) allow; deeper stages where a stage has little to multiply.
using GemmThin8 = MmaTile<16, 8, 1, 1, 64, 3>;
using GemmThin16 = MmaTile<16, 16, 1, 1, 64, 3>;
using GemmThin32 = MmaTile<16, 32, 1, 1, 32, 4>;

// The thin tile's width for N columns.
CHORUS_HD int gemm_thin_width(int64_t N) { return N <= 8 ? 8 : (N <= 16 ? 16 : 32); }

// Row length in shared memory of a tile whose stored rows run along k (A [m][k], Bᵀ [n][k]): a
// fragment read touches 8 rows (g) at 4 consecutive k (t), so the row length must be 4·odd (mod 32)
// for 32 distinct banks.
constexpr int gemm_ld_along_k(int bk) { return bk + 4; }
// Row length of a tile whose stored rows are k (Aᵀ [k][m], B [k][n]): a read touches 4 rows (t) at 8
// consecutive m or n (g), so the row length must be 8 or 24 (mod 32).
constexpr int gemm_ld_across_k(int width) { return width % 16 == 8 ? width : width + 8; }

// One stage in shared memory: A's tile (outer × inner floats as stored: [BM][BK], or [BK][BM] when
// transposed), then B's ([BK][BN], or [BN][BK] when transposed).
template <class T, bool TA, bool TB>
struct GemmStage {
  static constexpr int a_outer = TA ? T::BK : T::BM, a_inner = TA ? T::BM : T::BK;
  static constexpr int a_ld = TA ? gemm_ld_across_k(T::BM) : gemm_ld_along_k(T::BK);
  static constexpr int b_outer = TB ? T::BN : T::BK, b_inner = TB ? T::BK : T::BN;
  static constexpr int b_ld = TB ? gemm_ld_along_k(T::BK) : gemm_ld_across_k(T::BN);
  static constexpr int a_floats = a_outer * a_ld, b_floats = b_outer * b_ld;
  static constexpr int floats = a_floats + b_floats;
  static constexpr size_t smem_bytes = static_cast<size_t>(T::kStages) * floats * sizeof(float);
  static_assert(a_ld % 4 == 0 && b_ld % 4 == 0 && a_floats % 4 == 0, "rows must start on 16 bytes");
  static_assert(smem_bytes <= 227 * 1024, "more shared memory than one block may have");
  CHORUS_HD static int a_at(int m, int k) { return TA ? k * a_ld + m : m * a_ld + k; }
  CHORUS_HD static int b_at(int k, int n) { return a_floats + (TB ? n * b_ld + k : k * b_ld + n); }
};

// ---- staging: global → shared -------------------------------------------------------------------

// A and B may be read 16 bytes at a time when the base and the row stride are 16-byte aligned (the
// tile origins are multiples of 4); else 4 bytes at a time.
CHORUS_HD bool gemm_vector_ok(const float* p, int64_t ld) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0 && ld % 4 == 0;
}

// Thread tid's share of one operand tile of a stage: OUTER rows of INNER floats, global element
// (o0 + o, i0 + i) at base[(o0 + o)·ld + i0 + i] to dst[o·LD + i], zero outside [0, o_lim) ×
// [0, i_lim). copy(dst, src, bytes, src_bytes) copies the first src_bytes of src and zero-fills
// up to bytes (cp.async with a source size on the device); src is `base` when nothing is read.
// Consecutive threads take consecutive addresses of a row.
template <int OUTER, int INNER, int LD, int THREADS, class Copy>
CHORUS_HD void gemm_copy_tile(const float* base, int64_t ld, int64_t o0, int64_t o_lim, int64_t i0, int64_t i_lim,
                              float* dst, int tid, bool vec, Copy& copy) {
  if (vec) {
    constexpr int kPerRow = INNER / 4, kCount = OUTER * kPerRow;
    static_assert(INNER % 4 == 0, "rows of whole vectors");
    CHORUS_NO_UNROLL
    for (int r = 0; r < (kCount + THREADS - 1) / THREADS; ++r) {
      const int e = tid + r * THREADS;
      if (kCount % THREADS != 0 && e >= kCount) break;
      const int o = e / kPerRow, i = e % kPerRow * 4;
      const int64_t go = o0 + o, gi = i0 + i;
      const int64_t left = go < o_lim && gi < i_lim ? i_lim - gi : 0;
      const int valid = left < 4 ? static_cast<int>(left) : 4;
      copy(dst + o * LD + i, valid > 0 ? base + go * ld + gi : base, 16, 4 * valid);
    }
  } else {
    constexpr int kCount = OUTER * INNER;
    CHORUS_NO_UNROLL
    for (int r = 0; r < (kCount + THREADS - 1) / THREADS; ++r) {
      const int e = tid + r * THREADS;
      if (kCount % THREADS != 0 && e >= kCount) break;
      const int o = e / INNER, i = e % INNER;
      const int64_t go = o0 + o, gi = i0 + i;
      const bool in = go < o_lim && gi < i_lim;
      copy(dst + o * LD + i, in ? base + go * ld + gi : base, 4, in ? 4 : 0);
    }
  }
}

// Thread tid's share of the stage at k0 (of a chunk ending at k_end) for the block at (m0, n0).
template <class T, bool TA, bool TB, class Copy>
CHORUS_HD void gemm_load_stage(const GemmArgs& g, float* stage, int64_t m0, int64_t n0, int64_t k0, int64_t k_end,
                               int tid, bool vec_a, bool vec_b, Copy& copy) {
  using S = GemmStage<T, TA, TB>;
  if (TA)
    gemm_copy_tile<S::a_outer, S::a_inner, S::a_ld, T::kThreads>(g.A, g.lda, k0, k_end, m0, g.M, stage, tid, vec_a,
                                                                 copy);
  else
    gemm_copy_tile<S::a_outer, S::a_inner, S::a_ld, T::kThreads>(g.A, g.lda, m0, g.M, k0, k_end, stage, tid, vec_a,
                                                                 copy);
  float* b = stage + S::a_floats;
  if (TB)
    gemm_copy_tile<S::b_outer, S::b_inner, S::b_ld, T::kThreads>(g.B, g.ldb, n0, g.N, k0, k_end, b, tid, vec_b, copy);
  else
    gemm_copy_tile<S::b_outer, S::b_inner, S::b_ld, T::kThreads>(g.B, g.ldb, k0, k_end, n0, g.N, b, tid, vec_b, copy);
}

// The number of k-steps of the stage at k0 of a chunk ending at k_end: all of them but in the
// chunk's last stage, which runs only the steps that hold one of its k (gemm_chunk_steps).
template <class T>
CHORUS_HD int gemm_stage_steps(int64_t k0, int64_t k_end) {
  const int64_t steps = gemm_chunk_steps(k_end - k0);
  return steps < T::kSteps ? static_cast<int>(steps) : T::kSteps;
}

// ---- fragments and stores -----------------------------------------------------------------------

// Warp `warp`'s tile origin (rows, columns) within the block.
template <class T>
CHORUS_HD void gemm_warp_origin(int warp, int& row0, int& col0) {
  row0 = warp / T::WN * T::kWarpRows;
  col0 = warp % T::WN * T::kWarpCols;
}

// Lane `lane`'s A values of the 16 rows from row0 (of the block) at the k-step from kk (of the
// stage), and its B values of the 8 columns from col0.
template <class T, bool TA, bool TB>
CHORUS_HD void gemm_frag_a(const float* stage, int lane, int row0, int kk, float (&a)[4]) {
  CHORUS_UNROLL
  for (int i = 0; i < 4; ++i) {
    int r, k;
    mma_a_at(lane, i, r, k);
    a[i] = stage[GemmStage<T, TA, TB>::a_at(row0 + r, kk + k)];
  }
}
template <class T, bool TA, bool TB>
CHORUS_HD void gemm_frag_b(const float* stage, int lane, int col0, int kk, float (&b)[2]) {
  CHORUS_UNROLL
  for (int i = 0; i < 2; ++i) {
    int k, c;
    mma_b_at(lane, i, k, c);
    b[i] = stage[GemmStage<T, TA, TB>::b_at(kk + k, col0 + c)];
  }
}

// Writes lane `lane`'s accumulators of the 16 × 8 tile of C at (m, n) for chunk `split`: through
// the epilogue when K is one chunk, else as chunk sums for gemm_reduce_element.
CHORUS_HD void gemm_store_frag(const GemmArgs& g, const float (&acc)[4], int64_t m, int64_t n, int lane, int64_t split) {
  CHORUS_UNROLL
  for (int i = 0; i < 4; ++i) {
    int r, c;
    mma_c_at(lane, i, r, c);
    const int64_t gm = m + r, gn = n + c;
    if (gm < g.M && gn < g.N) {
      if (g.splits == 1) g.C[gm * g.ldc + gn] = gemm_epilogue(g, acc[i], gm, gn);
      else g.partial[(split * g.M + gm) * g.N + gn] = acc[i];
    }
  }
}

}  // namespace chorus::cuda::codec_ops
