// The tiles of the codec GEMM's tensor-core kernels (codec_gemm.cu), as functions of one thread or
// one lane: the kernels call them, and the CPU tests (tests/runtime/codec_gemm_emulation_test.cpp)
// run them over every thread of every block with the mma emulated, so that the staging of A and B
// in shared memory, the fragment indexing, the k-step counts and the stores are checked on machines
// without a GPU. The arithmetic of an element is codec_elements.h's (3xTF32, fixed k-steps); only
// the warp-wide mma and cp.async are device code (codec_gemm.cu).
//
// A block computes a BM × BN tile of C for one group of K chunks with WM × WN warps, each warp a
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

// ---- bf16 operands: rounding and the fragments of mma.m16n8k16 (.bf16) ---------------------------

// cvt.rn.bf16.f32: x to 8 significant bits, nearest with ties to even; NaN stays NaN. The host
// branch is that definition, for tests (the device packs pairs with cvt.rn.bf16x2.f32).
inline float bf16_round_host(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  return f32_from_bits(u & 0xffff0000u);
}

// Fragments of mma.m16n8k16 with .bf16 operands (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
// each 32-bit register holds two operands, h = 0 in its low half and h = 1 in its high half.
// Lane l = 4·g + t holds
//   A (16 × 16, row):   register i < 4, half h, at row g + 8·(i & 1), column (k) 2·t + h + 8·(i >> 1)
//   B (16 × 8, column): register i < 2, half h, at row (k) 2·t + h + 8·i,       column g
//   C, D (16 × 8):      as for mma.m16n8k8 (mma_c_at)
CHORUS_HD void mma16_a_at(int lane, int i, int h, int& row, int& k) {
  row = (lane >> 2) + 8 * (i & 1);
  k = 2 * (lane & 3) + h + 8 * (i >> 1);
}
CHORUS_HD void mma16_b_at(int lane, int i, int h, int& k, int& col) {
  k = 2 * (lane & 3) + h + 8 * i;
  col = lane >> 2;
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

// Large problems: 8 warps of 32 × 32 (a warp's chunk sums and their running total fit its
// registers).
using GemmLarge = MmaTile<128, 64, 4, 2, 32, 3>;
// When the large tiles would not fill the GPU: 4 warps of 32 × 32.
using GemmSmall = MmaTile<64, 64, 2, 2, 32, 3>;
// Few columns (a few streams' one step) or few rows (the transformer's rows of a few streams), or
// too few small tiles to fill the GPU: one warp of 16 rows by 8, 16 or 32 columns, so that the
// grid has as many blocks as the rows, the columns and the chunks allow; four stages in flight,
// since a stage has little to multiply, of 32 k, so that a block's 14–28 KB of shared memory let
// 8–16 of them share an SM.
using GemmThin8 = MmaTile<16, 8, 1, 1, 32, 4>;
using GemmThin16 = MmaTile<16, 16, 1, 1, 32, 4>;
using GemmThin32 = MmaTile<16, 32, 1, 1, 32, 4>;
// bf16 only (codec_gemm_wide.h): 8 warps of 64 × 32, or of 32 × 32 for fewer rows; three f32
// stages in flight.
using GemmWide = MmaTile<128, 128, 2, 4, 32, 3>;
using GemmWide64 = MmaTile<64, 128, 2, 4, 32, 3>;
// The wide tiles on operands stored as bf16 (gemm_bf16_operands): the same shapes with stages of
// 64 k, so that a barrier comes every four k-steps.
using GemmWide16 = MmaTile<128, 128, 2, 4, 64, 3>;
using GemmWide16x64 = MmaTile<64, 128, 2, 4, 64, 3>;

// The thin tile's width for N columns.
CHORUS_HD int gemm_thin_width(int64_t N) { return N <= 8 ? 8 : (N <= 16 ? 16 : 32); }

// ---- the order of a grid's tiles ----------------------------------------------------------------

// Tile (m, n) of a grid of gridDim.y × gridDim.x tiles for the block the GPU starts `order`-th
// (GPUs start them x first, then y, in practice): the row tiles of one column tile run together, so
// they read that column tile of B (the codec's columns: up to hundreds of MB, past the L2) while
// the L2 still holds it, instead of B once per row tile from memory. A (the weights) is small.
CHORUS_HD void gemm_tile_of_block(int64_t order, int64_t row_tiles, int64_t& m_tile, int64_t& n_tile) {
  m_tile = order % row_tiles;
  n_tile = order / row_tiles;
}

// ---- launch policy ------------------------------------------------------------------------------
// Host-side choice of the tile and of the chunk group (codec_gemm.cu); it sets the speed only.

enum class GemmTile { kLarge, kSmall, kThin8, kThin16, kThin32, kWide, kWide64 };

// Blocks that hold only some chunks write every chunk sum to the scratch, chunks·M·N floats; a
// product that would need more keeps its chunks in one block (such a product has tiles enough to
// fill the GPU).
constexpr int64_t kGemmMaxPartial = int64_t{1} << 25;
// Resident warps per SM the policy aims at (4 per scheduler), enough to hide the latency of the
// mma chains and the copies: the codec's products of a few streams are far from the tensor
// cores' throughput, so filling the SMs sets their time.
constexpr int64_t kGemmWarpsPerSm = 16;

inline int64_t gemm_target_warps(int64_t sms) { return kGemmWarpsPerSm * sms; }

// What the policy launches for one decode step of S streams × 1 frame of the Qwen3-TTS codec on
// 132 SMs (target 2112 warps); tile, chunk groups z, warps (R: chunk sums through the reduce):
//   product (× per step)          M      N         K     S = 1             S = 8             S = 128
//   RVQ projection (2)            512    S         256   thin8 1 32        thin8 1 32        thin16 1 256
//   pre_conv                      1024   S         1536  thin8 6 384 R     thin8 6 384 R     thin16 6 3072 R
//   input_proj ᵀᵀ, o, down (17)   S      512       1024  thin8 4 256 R     thin8 4 256 R     thin16 4 1024 R
//   qkv (8)                       S      3072      512   thin8 2 768 R     thin8 2 768 R     thin16 2 3072 R
//   gate_up (8)                   S      2048      512   thin8 2 512 R     thin8 2 512 R     thin16 2 2048 R
//   output_proj                   1024   S         512   thin8 2 128 R     thin8 2 128 R     thin16 2 1024 R
//   upsample conv_t ᵀ (2)         2048   S, 2S     1024  thin8 4 512 R     thin8/16 4 512 R  thin16/32 4 4096 R
//   upsample pw1 (2)              2S, 4S 4096      1024  thin8 4 2048 R    thin8 4 ≥2048 R   small 4|2 4096 R
//   upsample pw2 (2)              1024   2S, 4S    4096  thin8 16 1024 R   thin16 16 ≥1024 R small 16|6 ≥3072 R
//   conv_in                       1536   4S        7168  thin8 28 2688 R   thin32 28 2688 R  small 4 3072 R
//   block 1 conv_t ᵀ              12288  4S        1536  thin8 3 2304 R    thin32 3 2304 R   large 1 6144
//   block 1 conv1, conv2 (3 + 3)  768    32S       5376, 768: thin16 21|3 R; small 21|thin16 3 R; large 1
//   block 2 conv1 (3)             384    160S      2688  thin16 11 2640 R  small 6 2880 R    large 1 7680
//   block 3 conv1 (3)             192    640S      1344  thin16 6 2880 R   small 3 2880 R    small 1 15360
//   block 4 conv1 (3)             96     1920S     672   thin16 3 2160 R   small 3 5760 R    large 1 30720
//   conv_out                      1      1920S     672   thin8 3 720 R     thin16 3 2880 R   thin32 1 7680
// (block b conv_t: M = out·2r, K = in; conv1: K = 7·out; conv2: K = out; the other block products
// follow the same pattern.) Every chunk stays in one block (z = 1) where the product fills the
// GPU without spreading them or may not spread (chunks·M·N over kGemmMaxPartial).

inline bool gemm_may_split(int64_t M, int64_t N, int64_t chunks) {
  return chunks > 1 && chunks * M * N <= kGemmMaxPartial;
}

// The scratch that every shape up to M × N (with this K) may need: monotone in M and N, so the
// largest shape of a workspace sizes its scratch.
inline int64_t gemm_partial_bound(int64_t M, int64_t N, int64_t K) {
  const int64_t chunks = gemm_chunks(K);
  if (chunks == 1 || M <= 0 || N <= 0) return 0;
  const int64_t need = chunks * M * N;
  return need < kGemmMaxPartial ? need : kGemmMaxPartial;
}

inline int64_t gemm_tile_count(int64_t M, int64_t N, int64_t bm, int64_t bn) {
  return ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
}

inline int64_t gemm_tile_warps(GemmTile t) {
  switch (t) {
    case GemmTile::kLarge:
      return GemmLarge::kThreads / 32;
    case GemmTile::kSmall:
      return GemmSmall::kThreads / 32;
    case GemmTile::kWide:
    case GemmTile::kWide64:
      return GemmWide::kThreads / 32;
    default:
      return 1;
  }
}

// Warps of one chunk group's launch.
inline int64_t gemm_launch_warps(GemmTile t, int64_t M, int64_t N) {
  switch (t) {
    case GemmTile::kLarge:
      return gemm_tile_count(M, N, GemmLarge::BM, GemmLarge::BN) * gemm_tile_warps(t);
    case GemmTile::kSmall:
      return gemm_tile_count(M, N, GemmSmall::BM, GemmSmall::BN) * gemm_tile_warps(t);
    case GemmTile::kThin8:
      return gemm_tile_count(M, N, 16, 8);
    case GemmTile::kThin16:
      return gemm_tile_count(M, N, 16, 16);
    case GemmTile::kWide:
      return gemm_tile_count(M, N, GemmWide::BM, GemmWide::BN) * gemm_tile_warps(t);
    case GemmTile::kWide64:
      return gemm_tile_count(M, N, GemmWide64::BM, GemmWide64::BN) * gemm_tile_warps(t);
    case GemmTile::kThin32:
      break;
  }
  return gemm_tile_count(M, N, 16, 32);
}

// The thin tile: the widest (of 32, 16, 8; none wider than N needs) whose launch reaches the
// target with the chunks split, else the narrowest allowed: 8 when A has few rows (re-reading
// them costs nothing), else 16 (A's rows are then the weights, read once per column tile).
inline GemmTile gemm_thin_tile(int64_t M, int64_t N, int64_t chunks, int64_t target) {
  const int natural = gemm_thin_width(N);
  const int narrowest = M <= 32 ? 8 : (natural < 16 ? natural : 16);
  const int64_t z = gemm_may_split(M, N, chunks) ? chunks : 1;
  int w = natural;
  while (w > narrowest && gemm_tile_count(M, N, 16, w) * z < target) w /= 2;
  return w == 8 ? GemmTile::kThin8 : (w == 16 ? GemmTile::kThin16 : GemmTile::kThin32);
}

// The tile by size: thin for few rows or columns; large when its tiles alone give every SM two
// blocks and pad the matrix little more than the small ones would; small when its launch (the
// chunks split) reaches the target; else thin, which has twice small's warps on the same matrix.
inline GemmTile gemm_auto_tile(int64_t M, int64_t N, int64_t chunks, int64_t sms) {
  const int64_t target = gemm_target_warps(sms);
  if (M <= GemmThin32::BM || N <= 64) return gemm_thin_tile(M, N, chunks, target);
  auto padded = [](int64_t x, int64_t to) { return (x + to - 1) / to * to; };
  const int64_t large = padded(M, GemmLarge::BM) * padded(N, GemmLarge::BN);
  const int64_t small = padded(M, GemmSmall::BM) * padded(N, GemmSmall::BN);
  if (gemm_tile_count(M, N, GemmLarge::BM, GemmLarge::BN) >= 2 * sms && 4 * large <= 5 * small) return GemmTile::kLarge;
  const int64_t z = gemm_may_split(M, N, chunks) ? chunks : 1;
  if (gemm_launch_warps(GemmTile::kSmall, M, N) * z >= target) return GemmTile::kSmall;
  return gemm_thin_tile(M, N, chunks, target);
}

// The chunks per block: all of them when the launch reaches the target so (or may not split),
// else the most chunks per block that still give the groups the target needs (one chunk per
// block when even that falls short).
inline int64_t gemm_group(GemmTile t, int64_t M, int64_t N, int64_t chunks, int64_t sms) {
  const int64_t target = gemm_target_warps(sms), warps = gemm_launch_warps(t, M, N);
  if (!gemm_may_split(M, N, chunks) || warps >= target) return chunks;
  const int64_t want = (target + warps - 1) / warps, group = chunks / want;
  return group > 1 ? group : 1;
}

// Row length in shared memory of a tile whose stored rows run along k (A [m][k], Bᵀ [n][k]). TF32:
// a fragment read touches 8 rows (g) at 4 consecutive k (t), so the row length must be 4·odd (mod
// 32) for 32 distinct banks. BF16: a lane reads its pair of consecutive k as one 8-byte load, which
// the hardware serves per half warp (4 rows at 4 pairs), so the row length must be 8 or 24 (mod 32).
constexpr int gemm_ld_along_k(int bk, GemmPrecision p) { return p == GemmPrecision::kBf16 ? bk + 8 : bk + 4; }
// Row length of a tile whose stored rows are k (Aᵀ [k][m], B [k][n]). TF32: a read touches 4 rows (t)
// at 8 consecutive m or n (g), so the row length must be 8 or 24 (mod 32). BF16: a read touches the
// 4 rows 2·t (+ h) two apart, so the row length must be 4·odd (mod 32).
constexpr int gemm_ld_across_k(int width, GemmPrecision p) {
  return p == GemmPrecision::kBf16 ? (width % 8 == 4 ? width : (width + 7) / 8 * 8 + 4)
                                   : (width % 16 == 8 ? width : width + 8);
}

// One stage in shared memory: A's tile (outer × inner floats as stored: [BM][BK], or [BK][BM] when
// transposed), then B's ([BK][BN], or [BN][BK] when transposed). Both precisions stage f32 values;
// the rows are padded for the precision's fragment reads.
template <class T, bool TA, bool TB, GemmPrecision P = GemmPrecision::kF32>
struct GemmStage {
  static constexpr int a_outer = TA ? T::BK : T::BM, a_inner = TA ? T::BM : T::BK;
  static constexpr int a_ld = TA ? gemm_ld_across_k(T::BM, P) : gemm_ld_along_k(T::BK, P);
  static constexpr int b_outer = TB ? T::BN : T::BK, b_inner = TB ? T::BK : T::BN;
  static constexpr int b_ld = TB ? gemm_ld_along_k(T::BK, P) : gemm_ld_across_k(T::BN, P);
  static constexpr int a_floats = a_outer * a_ld, b_floats = b_outer * b_ld;
  static constexpr int floats = a_floats + b_floats;
  static constexpr size_t smem_bytes = static_cast<size_t>(T::kStages) * floats * sizeof(float);
  static_assert(a_ld % 4 == 0 && b_ld % 4 == 0 && a_floats % 4 == 0, "rows must start on 16 bytes");
  static_assert(P == GemmPrecision::kF32 || T::BK % 16 == 0, "bf16 steps of 16 k must tile a stage");
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

// Thread tid's share of the stage at k0 (of a group ending at k_end) for the block at (m0, n0).
template <class T, bool TA, bool TB, GemmPrecision P, class Copy>
CHORUS_HD void gemm_load_stage(const GemmArgs& g, float* stage, int64_t m0, int64_t n0, int64_t k0, int64_t k_end,
                               int tid, bool vec_a, bool vec_b, Copy& copy) {
  using S = GemmStage<T, TA, TB, P>;
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

// The number of k-steps (of gemm_k_step(P)) of the stage at k0 of a group ending at k_end: all of
// them but in K's last stage, which runs only the steps that hold one of its k. Chunks start on
// stage boundaries, so a stage never straddles two chunks and only K's last chunk is short; the
// stage holds zeros past k_end.
template <class T, GemmPrecision P = GemmPrecision::kF32>
CHORUS_HD int gemm_stage_steps(int64_t k0, int64_t k_end) {
  const int step = gemm_k_step(P), all = T::BK / step;
  const int64_t steps = (k_end - k0 + step - 1) / step;
  return steps < all ? static_cast<int>(steps) : all;
}

// Whether the stage at k0 (of a group ending at k_end) is the last of its chunk.
template <class T>
CHORUS_HD bool gemm_stage_ends_chunk(int64_t k0, int64_t k_end) {
  return k0 + T::BK >= k_end || (k0 + T::BK) % kGemmKChunk == 0;
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

// Lane `lane`'s bf16-step operands (mma16_*_at), still f32: a[2·i + h] of A's 16 rows from row0 at
// the k-step from kk, b[2·i + h] of B's 8 columns from col0. A pair along a stored row is one 8-byte
// load on the device.
template <class T, bool TA, bool TB>
CHORUS_HD void gemm_frag_a16(const float* stage, int lane, int row0, int kk, float (&a)[8]) {
  using S = GemmStage<T, TA, TB, GemmPrecision::kBf16>;
  CHORUS_UNROLL
  for (int i = 0; i < 4; ++i) {
    int r, k;
    mma16_a_at(lane, i, 0, r, k);
    const int at = S::a_at(row0 + r, kk + k);
#if defined(__CUDA_ARCH__)
    if constexpr (!TA) {
      const float2 v = *reinterpret_cast<const float2*>(stage + at);
      a[2 * i] = v.x;
      a[2 * i + 1] = v.y;
      continue;
    }
#endif
    a[2 * i] = stage[at];
    a[2 * i + 1] = stage[S::a_at(row0 + r, kk + k + 1)];
  }
}
template <class T, bool TA, bool TB>
CHORUS_HD void gemm_frag_b16(const float* stage, int lane, int col0, int kk, float (&b)[4]) {
  using S = GemmStage<T, TA, TB, GemmPrecision::kBf16>;
  CHORUS_UNROLL
  for (int i = 0; i < 2; ++i) {
    int k, c;
    mma16_b_at(lane, i, 0, k, c);
    const int at = S::b_at(kk + k, col0 + c);
#if defined(__CUDA_ARCH__)
    if constexpr (TB) {
      const float2 v = *reinterpret_cast<const float2*>(stage + at);
      b[2 * i] = v.x;
      b[2 * i + 1] = v.y;
      continue;
    }
#endif
    b[2 * i] = stage[at];
    b[2 * i + 1] = stage[S::b_at(kk + k + 1, col0 + c)];
  }
}

// The end of chunk `chunk` for lane `lane`'s accumulators of the 16 × 8 tile of C at (m, n): when
// the block holds every chunk the chunk sums are added into `running` in order, else the chunk
// sum goes to g.partial for gemm_reduce_element. The accumulators restart from +0.
CHORUS_HD void gemm_end_chunk(const GemmArgs& g, float (&acc)[4], float (&running)[4], int64_t m, int64_t n, int lane,
                              int64_t chunk) {
  const bool whole = gemm_whole_k(g);
  CHORUS_UNROLL
  for (int i = 0; i < 4; ++i) {
    if (whole) {
      running[i] = gemm_add_chunk(running[i], acc[i], chunk);
    } else {
      int r, c;
      mma_c_at(lane, i, r, c);
      const int64_t gm = m + r, gn = n + c;
      if (gm < g.M && gn < g.N) g.partial[(chunk * g.M + gm) * g.N + gn] = acc[i];
    }
    acc[i] = 0.0f;
  }
}

// Writes lane `lane`'s sums of the 16 × 8 tile of C at (m, n) through the epilogue (a block that
// holds every chunk).
CHORUS_HD void gemm_store_frag(const GemmArgs& g, const float (&sum)[4], int64_t m, int64_t n, int lane) {
  CHORUS_UNROLL
  for (int i = 0; i < 4; ++i) {
    int r, c;
    mma_c_at(lane, i, r, c);
    const int64_t gm = m + r, gn = n + c;
    if (gm < g.M && gn < g.N) g.C[gm * g.ldc + gn] = gemm_epilogue(g, sum[i], gm, gn);
  }
}

}  // namespace chorus::cuda::codec_ops
