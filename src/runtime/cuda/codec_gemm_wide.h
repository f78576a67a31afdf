// The wide tiles of the codec GEMM's bf16 precision (codec_gemm_wide.cu), as functions of one
// thread or one lane, so that the CPU tests (tests/runtime/codec_gemm_wide_test.cpp) run the
// kernels' data flow on machines without a GPU. The arithmetic of an element is codec_elements.h's
// bf16 contract (k-steps of 16 per chunk, operands rounded to bf16 with cvt.rn), so these tiles
// give the same bits as the other tiles; what differs is the data flow, built for products large
// enough to keep the tensor cores busy:
//   - each thread copies its share of a stage's A and B as f32 (cp.async, 16 bytes where aligned)
//     into its own slots of a ring of kStages stages in shared memory, so that that many stages
//     are in flight; once a stage has arrived the thread rounds its own values to bf16 and stores
//     them to one of two bf16 buffers in the layout of global memory (rows padded by 16 bytes),
//     which the warps multiply after a barrier;
//   - the warps read their fragments with ldmatrix (.trans where the stored rows are k), four 8 × 8
//     matrices per instruction, and each warp multiplies a 64 × 32 or 32 × 32 tile.
// K chunks, chunk groups, the chunk sums and the stores are codec_gemm_tiles.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime/cuda/codec_gemm_tiles.h"

namespace chorus::cuda::codec_ops {

// One buffer of bf16 values (as uint16_t): A's tile as stored ([BM][BK], or [BK][BM] when
// transposed), then B's ([BK][BN], or [BN][BK]). A row is padded by 8 values (16 bytes) so that
// the 8 rows of an ldmatrix start 16·odd bytes apart (mod 128) and so hit distinct banks.
template <class T, bool TA, bool TB>
struct WideStage {
  static constexpr int a_outer = TA ? T::BK : T::BM, a_inner = TA ? T::BM : T::BK;
  static constexpr int b_outer = TB ? T::BN : T::BK, b_inner = TB ? T::BK : T::BN;
  static constexpr int a_ld = a_inner + 8, b_ld = b_inner + 8;
  static constexpr int a_elems = a_outer * a_ld, elems = a_elems + b_outer * b_ld;
  // A thread's quads (4 consecutive values of a stored row) per stage.
  static constexpr int a_quads = a_outer * a_inner / 4 / T::kThreads, b_quads = b_outer * b_inner / 4 / T::kThreads;
  static constexpr int quads = a_quads + b_quads;
  // The two bf16 buffers, then the f32 ring of kStages stages.
  static constexpr size_t bf16_bytes = 2 * static_cast<size_t>(elems) * sizeof(uint16_t);
  static constexpr size_t smem_bytes = bf16_bytes + static_cast<size_t>(T::kStages) * quads * T::kThreads * 16;
  static_assert(a_inner % 16 == 0 && b_inner % 16 == 0, "rows of whole 8 × 8 matrices, 16·odd bytes apart");
  static_assert(a_quads * 4 * T::kThreads == a_outer * a_inner && b_quads * 4 * T::kThreads == b_outer * b_inner,
                "every thread stages whole quads");
  static_assert(T::MT >= 1 && T::NT % 2 == 0, "ldmatrix.x4 reads two 8-column B tiles");
  static_assert(bf16_bytes % 16 == 0, "the ring on 16 bytes");
};

// Quad q (< a_quads or b_quads) of thread tid in a tile of INNER-wide rows: its row and first
// column. Consecutive threads take consecutive quads of a row.
template <int INNER, int THREADS>
CHORUS_HD void wide_quad(int tid, int q, int& row, int& col) {
  const int e = tid + q * THREADS;
  row = e / (INNER / 4);
  col = e % (INNER / 4) * 4;
}

// Copies the 4 values at (go, gi .. gi + 3) of base (leading dimension ld) to dst, zero outside
// [0, o_lim) × [0, i_lim): copy(dst, src, bytes, src_bytes) as gemm_copy_tile's, one 16-byte
// copy when `vec` (gemm_vector_ok), else four of 4 bytes.
template <class Copy>
CHORUS_HD void wide_copy_quad(const float* base, int64_t ld, int64_t go, int64_t o_lim, int64_t gi, int64_t i_lim,
                              bool vec, float* dst, Copy& copy) {
  const bool row_in = go < o_lim;
  if (vec) {
    const int64_t left = row_in && gi < i_lim ? i_lim - gi : 0;
    const int valid = left < 4 ? static_cast<int>(left) : 4;
    copy(dst, valid > 0 ? base + go * ld + gi : base, 16, 4 * valid);
    return;
  }
  CHORUS_UNROLL
  for (int i = 0; i < 4; ++i) {
    const bool in = row_in && gi + i < i_lim;
    copy(dst + i, in ? base + go * ld + gi + i : base, 4, in ? 4 : 0);
  }
}

// Thread tid's quad q of A (b = false) or B (b = true) of the stage at k0 (of a group ending at
// k_end) for the block at (m0, n0), copied as f32 to dst (the thread's slot for it in the ring,
// wide_ring_at); wide_store_at says where its bf16 values go.
template <class T, bool TA, bool TB, class Copy>
CHORUS_HD void wide_copy(const GemmArgs& g, bool b, int64_t m0, int64_t n0, int64_t k0, int64_t k_end, int tid, int q,
                         bool vec, float* dst, Copy& copy) {
  using S = WideStage<T, TA, TB>;
  int o = 0, i = 0;
  if (!b) {
    wide_quad<S::a_inner, T::kThreads>(tid, q, o, i);
    if (TA)
      wide_copy_quad(g.A, g.lda, k0 + o, k_end, m0 + i, g.M, vec, dst, copy);
    else
      wide_copy_quad(g.A, g.lda, m0 + o, g.M, k0 + i, k_end, vec, dst, copy);
  } else {
    wide_quad<S::b_inner, T::kThreads>(tid, q, o, i);
    if (TB)
      wide_copy_quad(g.B, g.ldb, n0 + o, g.N, k0 + i, k_end, vec, dst, copy);
    else
      wide_copy_quad(g.B, g.ldb, k0 + o, k_end, n0 + i, g.N, vec, dst, copy);
  }
}

// Whether every quad of the stage at k0 lies inside A and B and may be read 16 bytes at a time:
// the block's tile inside C, the stage inside the group's k, both operands aligned. Such a stage
// takes wide_copy_inside, which skips the bounds.
template <class T>
CHORUS_HD bool wide_stage_inside(const GemmArgs& g, int64_t m0, int64_t n0, int64_t k0, int64_t k_end, bool vec_a,
                                 bool vec_b) {
  return vec_a && vec_b && m0 + T::BM <= g.M && n0 + T::BN <= g.N && k0 + T::BK <= k_end;
}

// wide_copy for a stage that wide_stage_inside admits: one 16-byte copy of 16 bytes.
template <class T, bool TA, bool TB, class Copy>
CHORUS_HD void wide_copy_inside(const GemmArgs& g, bool b, int64_t m0, int64_t n0, int64_t k0, int tid, int q,
                                float* dst, Copy& copy) {
  using S = WideStage<T, TA, TB>;
  int o = 0, i = 0;
  const float* src = nullptr;
  if (!b) {
    wide_quad<S::a_inner, T::kThreads>(tid, q, o, i);
    src = TA ? g.A + (k0 + o) * g.lda + m0 + i : g.A + (m0 + o) * g.lda + k0 + i;
  } else {
    wide_quad<S::b_inner, T::kThreads>(tid, q, o, i);
    src = TB ? g.B + (n0 + o) * g.ldb + k0 + i : g.B + (k0 + o) * g.ldb + n0 + i;
  }
  copy(dst, src, 16, 16);
}

// The f32 ring (after the two bf16 buffers, in floats from its start): slot s of kStages holds a
// stage's quads, thread by thread (quad q of A, then of B, at (q·threads + tid)·4), so that a warp's
// copies and reads are 512 consecutive bytes. Only the thread that copied a quad reads it.
template <class T, bool TA, bool TB>
CHORUS_HD int wide_ring_at(int slot, bool b, int tid, int q) {
  using S = WideStage<T, TA, TB>;
  return ((slot * S::quads + (b ? S::a_quads : 0) + q) * T::kThreads + tid) * 4;
}

// Where thread tid's quad q of A (b = false) or B goes in a buffer (the index of its first value;
// 8-byte aligned).
template <class T, bool TA, bool TB>
CHORUS_HD int wide_store_at(bool b, int tid, int q) {
  using S = WideStage<T, TA, TB>;
  int o = 0, i = 0;
  if (!b) {
    wide_quad<S::a_inner, T::kThreads>(tid, q, o, i);
    return o * S::a_ld + i;
  }
  wide_quad<S::b_inner, T::kThreads>(tid, q, o, i);
  return S::a_elems + o * S::b_ld + i;
}

// ldmatrix.x4: lane l gives the address of row l % 8 of matrix l / 8 and receives, in register
// j, the pair at row l / 4, columns 2·(l % 4) and + 1 of matrix j (.trans: at rows 2·(l % 4) and
// + 1, column l / 4), the lower column (row) in the low half.
//
// A's 16 × 16 fragment at (row0, kk) of the stage (mma16_a_at: register i covers rows + 8·(i & 1)
// and k + 8·(i >> 1)): matrix j is that 8 × 8 block; stored [m][k] its rows are m (plain
// ldmatrix), stored [k][m] they are k (.trans). Returns lane's address, a buffer index.
template <class T, bool TA, bool TB>
CHORUS_HD int wide_a_lane(int lane, int row0, int kk) {
  using S = WideStage<T, TA, TB>;
  const int j = lane >> 3, r = lane & 7;
  if (TA) return (kk + r + 8 * (j >> 1)) * S::a_ld + row0 + 8 * (j & 1);
  return (row0 + r + 8 * (j & 1)) * S::a_ld + kk + 8 * (j >> 1);
}

// B's two 16 × 8 fragments at columns col0 and col0 + 8, k from kk (mma16_b_at: register i covers
// k + 8·i): matrix j is the block at k + 8·(j & 1), columns + 8·(j >> 1), so registers 0, 1 are
// the first fragment's and 2, 3 the second's; stored [n][k] its rows are n (plain), stored [k][n]
// they are k (.trans).
template <class T, bool TA, bool TB>
CHORUS_HD int wide_b_lane(int lane, int col0, int kk) {
  using S = WideStage<T, TA, TB>;
  const int j = lane >> 3, r = lane & 7;
  if (TB) return S::a_elems + (col0 + r + 8 * (j >> 1)) * S::b_ld + kk + 8 * (j & 1);
  return S::a_elems + (kk + r + 8 * (j & 1)) * S::b_ld + col0 + 8 * (j >> 1);
}

// ---- bf16 operands in global memory (gemm_bf16_operands) ----------------------------------------
// A [M, K] and B [K, N] stored as bf16, neither transposed: no rounding pass, so each thread copies
// 16-byte chunks of 8 values straight into the stage's buffer (the layout of WideStage<T, false,
// false>), kStages buffers in flight. K, N and the leading dimensions are multiples of 8 and the
// operands 16-byte aligned (the caller checks), so a chunk lies wholly inside or wholly outside.

template <class T>
struct Wide16Stage {
  using S = WideStage<T, false, false>;
  static constexpr int a_chunks = T::BM * T::BK / 8 / T::kThreads, b_chunks = T::BK * T::BN / 8 / T::kThreads;
  static constexpr size_t smem_bytes = static_cast<size_t>(T::kStages) * S::elems * sizeof(uint16_t);
  static_assert(a_chunks * 8 * T::kThreads == T::BM * T::BK && b_chunks * 8 * T::kThreads == T::BK * T::BN,
                "every thread copies whole chunks");
  static_assert(S::elems % 8 == 0 && smem_bytes <= 227 * 1024, "buffers on 16 bytes, within one block's share");
};

// Chunk q of thread tid in a tile of INNER-wide rows: its row and first column.
template <int INNER, int THREADS>
CHORUS_HD void wide16_chunk(int tid, int q, int& row, int& col) {
  const int e = tid + q * THREADS;
  row = e / (INNER / 8);
  col = e % (INNER / 8) * 8;
}

// Thread tid's chunk q of A (b = false) or B of the stage at k0 (of a group ending at k_end) for
// the block at (m0, n0), into `stage` (one buffer): copy(dst, src, 16, 16), or (dst, A16 or B16,
// 16, 0) to zero-fill a chunk outside the operand.
template <class T, class Copy>
CHORUS_HD void wide16_copy(const GemmArgs& g, bool b, int64_t m0, int64_t n0, int64_t k0, int64_t k_end, int tid, int q,
                           uint16_t* stage, Copy& copy) {
  using S = WideStage<T, false, false>;
  int o = 0, i = 0;
  if (!b) {
    wide16_chunk<T::BK, T::kThreads>(tid, q, o, i);
    const int64_t m = m0 + o, k = k0 + i;
    const bool in = m < g.M && k < k_end;
    copy(stage + o * S::a_ld + i, in ? g.A16 + m * g.lda + k : g.A16, 16, in ? 16 : 0);
  } else {
    wide16_chunk<T::BN, T::kThreads>(tid, q, o, i);
    const int64_t k = k0 + o, n = n0 + i;
    const bool in = k < k_end && n < g.N;
    copy(stage + S::a_elems + o * S::b_ld + i, in ? g.B16 + k * g.ldb + n : g.B16, 16, in ? 16 : 0);
  }
}

// ---- launch policy for bf16 -----------------------------------------------------------------

// The bf16 tile by size: thin for few rows or columns (as f32); 128 × 128 when its tiles give
// every SM two and pad the matrix little more than 64 × 128 would; 64 × 128 when its launch (the
// chunks split) reaches the target; else gemm_auto_tile's choice.
inline GemmTile gemm_auto_tile_bf16(int64_t M, int64_t N, int64_t chunks, int64_t sms) {
  if (M <= GemmThin32::BM || N <= 64) return gemm_auto_tile(M, N, chunks, sms);
  auto padded = [](int64_t x, int64_t to) { return (x + to - 1) / to * to; };
  const int64_t wide = padded(M, GemmWide::BM) * padded(N, GemmWide::BN);
  const int64_t wide64 = padded(M, GemmWide64::BM) * padded(N, GemmWide64::BN);
  if (gemm_tile_count(M, N, GemmWide::BM, GemmWide::BN) >= 2 * sms && 4 * wide <= 5 * wide64) return GemmTile::kWide;
  const int64_t z = gemm_may_split(M, N, chunks) ? chunks : 1;
  if (gemm_launch_warps(GemmTile::kWide64, M, N) * z >= gemm_target_warps(sms)) return GemmTile::kWide64;
  return gemm_auto_tile(M, N, chunks, sms);
}

// Whether gemm_bf16_operands takes a product: the bf16 policy puts it on a wide tile, and its
// sizes allow whole 16-byte chunks (A [M, K] and B [K, N] unpadded).
inline bool gemm_bf16_operands_fit(int64_t M, int64_t N, int64_t K, int64_t sms) {
  const GemmTile t = gemm_auto_tile_bf16(M, N, gemm_chunks(K), sms);
  return (t == GemmTile::kWide || t == GemmTile::kWide64) && K % 8 == 0 && N % 8 == 0 && K > 0;
}

}  // namespace chorus::cuda::codec_ops
