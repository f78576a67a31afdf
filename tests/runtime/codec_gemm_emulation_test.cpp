// The GPU codec GEMM's data flow (runtime/cuda/codec_gemm_tiles.h) run on the CPU: every thread of
// every block stages A and B through the same functions the CUDA kernel calls, every lane reads its
// fragments through the same functions, and the warp-wide mma is emulated here from the PTX ISA's
// fragment layouts of mma.m16n8k8 (.tf32) and mma.m16n8k16 (.bf16), written out independently of
// the header's helpers. The
// emulated mma's arithmetic is a model (exact products of the operands' TF32 bits, summed in
// double in k order, rounded once): the tensor cores' own accumulation is not IEEE-sequential, so
// the device's bits are checked on the device (tests/gpu/codec_gemm_cuda_test.cpp). What the model
// checks here is everything around the arithmetic: each output gets exactly the contract's operands
// in the contract's order — k-steps of 8 ascending within each chunk, zero padding past the
// chunk's end, the three products lo·hi, hi·lo, hi·hi — for every tile shape, both copy widths
// and all four transposes, with ragged edges, odd leading dimensions and several chunks; and that
// the model result is the product (against double precision). The bf16 path likewise: k-steps of
// 16, each operand rounded to bf16 once, one product. Also checked: the fragment maps cover each
// fragment once per warp and their shared-memory reads are free of bank conflicts, and the TF32
// and bf16 roundings and the TF32 split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/codec_gemm_tiles.h"
#include "codec_gemm_grid.h"
#include "codec_gemm_model.h"

namespace chorus::cuda::codec_ops {
namespace {

using namespace gemm_model;

// ---- fragments ------------------------------------------------------------------------------

TEST(CodecGemmFragments, EachMapCoversItsFragmentOncePerWarp) {
  int a_seen[16][8] = {}, b_seen[8][8] = {}, c_seen[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      int r = -1, k = -1;
      mma_a_at(lane, i, r, k);
      ASSERT_TRUE(r >= 0 && r < 16 && k >= 0 && k < 8) << lane << " " << i;
      ++a_seen[r][k];
      int cr = -1, cc = -1;
      mma_c_at(lane, i, cr, cc);
      ASSERT_TRUE(cr >= 0 && cr < 16 && cc >= 0 && cc < 8) << lane << " " << i;
      ++c_seen[cr][cc];
    }
    for (int i = 0; i < 2; ++i) {
      int k = -1, c = -1;
      mma_b_at(lane, i, k, c);
      ASSERT_TRUE(k >= 0 && k < 8 && c >= 0 && c < 8) << lane << " " << i;
      ++b_seen[k][c];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(a_seen[r][c], 1) << "A " << r << "," << c;
      EXPECT_EQ(c_seen[r][c], 1) << "C " << r << "," << c;
      if (r < 8) {
        EXPECT_EQ(b_seen[r][c], 1) << "B " << r << "," << c;
      }
    }
}

// Entries of the PTX ISA's figures for .tf32 m16n8k8 (lane 0, lane 5 = group 1 thread 1, lane 31).
TEST(CodecGemmFragments, MapsMatchThePtxFigures) {
  struct At {
    int lane, i, row, col;
  };
  for (const At& e : {At{0, 0, 0, 0}, At{0, 1, 8, 0}, At{0, 2, 0, 4}, At{0, 3, 8, 4}, At{5, 0, 1, 1}, At{5, 1, 9, 1},
                      At{5, 2, 1, 5}, At{5, 3, 9, 5}, At{31, 0, 7, 3}, At{31, 3, 15, 7}}) {
    int r, k;
    mma_a_at(e.lane, e.i, r, k);
    EXPECT_EQ(r, e.row) << "A lane " << e.lane << " a" << e.i;
    EXPECT_EQ(k, e.col) << "A lane " << e.lane << " a" << e.i;
  }
  for (const At& e : {At{0, 0, 0, 0}, At{0, 1, 4, 0}, At{5, 0, 1, 1}, At{5, 1, 5, 1}, At{31, 0, 3, 7}, At{31, 1, 7, 7}}) {
    int k, c;
    mma_b_at(e.lane, e.i, k, c);
    EXPECT_EQ(k, e.row) << "B lane " << e.lane << " b" << e.i;
    EXPECT_EQ(c, e.col) << "B lane " << e.lane << " b" << e.i;
  }
  for (const At& e : {At{0, 0, 0, 0}, At{0, 1, 0, 1}, At{0, 2, 8, 0}, At{5, 0, 1, 2}, At{5, 3, 9, 3}, At{31, 1, 7, 7},
                      At{31, 2, 15, 6}}) {
    int r, c;
    mma_c_at(e.lane, e.i, r, c);
    EXPECT_EQ(r, e.row) << "C lane " << e.lane << " c" << e.i;
    EXPECT_EQ(c, e.col) << "C lane " << e.lane << " c" << e.i;
  }
}

// The .bf16 m16n8k16 maps: every (row, k) of A's 16 × 16, (k, column) of B's 16 × 8 once per warp.
TEST(CodecGemmFragments, Bf16MapsCoverTheirFragmentOncePerWarp) {
  int a_seen[16][16] = {}, b_seen[16][8] = {};
  for (int lane = 0; lane < 32; ++lane)
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 4; ++i) {
        int r = -1, k = -1;
        mma16_a_at(lane, i, h, r, k);
        ASSERT_TRUE(r >= 0 && r < 16 && k >= 0 && k < 16) << lane << " " << i << " " << h;
        ++a_seen[r][k];
      }
      for (int i = 0; i < 2; ++i) {
        int k = -1, c = -1;
        mma16_b_at(lane, i, h, k, c);
        ASSERT_TRUE(k >= 0 && k < 16 && c >= 0 && c < 8) << lane << " " << i << " " << h;
        ++b_seen[k][c];
      }
    }
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      EXPECT_EQ(a_seen[r][c], 1) << "A " << r << "," << c;
      if (c < 8) {
        EXPECT_EQ(b_seen[r][c], 1) << "B " << r << "," << c;
      }
    }
}

// Entries of the PTX ISA's figures for .bf16 m16n8k16: A's a0..a7 of lane 0 at (0, 0), (0, 1), (8, 0),
// (8, 1), (0, 8), (0, 9), (8, 8), (8, 9); lane 5 (group 1, thread 1) and lane 31 likewise; B's b0..b3.
TEST(CodecGemmFragments, Bf16MapsMatchThePtxFigures) {
  struct At {
    int lane, element, row, col;  // element: a0..a7 or b0..b3 as the figure numbers them
  };
  for (const At& e : {At{0, 0, 0, 0}, At{0, 1, 0, 1}, At{0, 2, 8, 0}, At{0, 3, 8, 1}, At{0, 4, 0, 8}, At{0, 5, 0, 9},
                      At{0, 6, 8, 8}, At{0, 7, 8, 9}, At{5, 0, 1, 2}, At{5, 3, 9, 3}, At{5, 6, 9, 10}, At{31, 0, 7, 6},
                      At{31, 7, 15, 15}}) {
    int r, k;
    mma16_a_at(e.lane, e.element / 2, e.element % 2, r, k);
    EXPECT_EQ(r, e.row) << "A lane " << e.lane << " a" << e.element;
    EXPECT_EQ(k, e.col) << "A lane " << e.lane << " a" << e.element;
  }
  for (const At& e : {At{0, 0, 0, 0}, At{0, 1, 1, 0}, At{0, 2, 8, 0}, At{0, 3, 9, 0}, At{5, 0, 2, 1}, At{5, 3, 11, 1},
                      At{31, 0, 6, 7}, At{31, 3, 15, 7}}) {
    int k, c;
    mma16_b_at(e.lane, e.element / 2, e.element % 2, k, c);
    EXPECT_EQ(k, e.row) << "B lane " << e.lane << " b" << e.element;
    EXPECT_EQ(c, e.col) << "B lane " << e.lane << " b" << e.element;
  }
}

// Each fragment register's 32 shared-memory reads (one per lane) fall in 32 distinct banks.
template <class T, bool TA, bool TB>
void expect_conflict_free(const char* name) {
  using S = GemmStage<T, TA, TB>;
  for (int ks = 0; ks < T::kSteps; ++ks)
    for (int row0 = 0; row0 < T::BM; row0 += 16)
      for (int i = 0; i < 4; ++i) {
        bool bank[32] = {};
        int distinct = 0;
        for (int lane = 0; lane < 32; ++lane) {
          int r, k;
          mma_a_at(lane, i, r, k);
          const int b = S::a_at(row0 + r, ks * 8 + k) % 32;
          distinct += !bank[b];
          bank[b] = true;
        }
        EXPECT_EQ(distinct, 32) << name << " A ta=" << TA << " a" << i;
      }
  for (int ks = 0; ks < T::kSteps; ++ks)
    for (int col0 = 0; col0 < T::BN; col0 += 8)
      for (int i = 0; i < 2; ++i) {
        bool bank[32] = {};
        int distinct = 0;
        for (int lane = 0; lane < 32; ++lane) {
          int k, c;
          mma_b_at(lane, i, k, c);
          const int b = S::b_at(ks * 8 + k, col0 + c) % 32;
          distinct += !bank[b];
          bank[b] = true;
        }
        EXPECT_EQ(distinct, 32) << name << " B tb=" << TB << " b" << i;
      }
}

template <class T>
void expect_conflict_free_all(const char* name) {
  expect_conflict_free<T, false, false>(name);
  expect_conflict_free<T, false, true>(name);
  expect_conflict_free<T, true, false>(name);
  expect_conflict_free<T, true, true>(name);
}

// The bf16 reads: a register whose pair lies along a stored row is one 8-byte load per lane, served
// per half warp, so each half warp's 16 pairs must cover 32 distinct banks; a pair across rows is
// two 4-byte loads, each of whose 32 reads must fall in distinct banks.
template <class T, bool TA, bool TB>
void expect_bf16_conflict_free(const char* name) {
  using S = GemmStage<T, TA, TB, GemmPrecision::kBf16>;
  auto check = [&](bool pair_load, auto at, const char* what) {
    if (pair_load) {
      for (int half = 0; half < 2; ++half) {
        bool bank[32] = {};
        int distinct = 0;
        for (int lane = 16 * half; lane < 16 * half + 16; ++lane)
          for (int h = 0; h < 2; ++h) {
            const int b = at(lane, h) % 32;
            distinct += !bank[b];
            bank[b] = true;
          }
        EXPECT_EQ(distinct, 32) << name << " " << what << " half warp " << half;
      }
    } else {
      for (int h = 0; h < 2; ++h) {
        bool bank[32] = {};
        int distinct = 0;
        for (int lane = 0; lane < 32; ++lane) {
          const int b = at(lane, h) % 32;
          distinct += !bank[b];
          bank[b] = true;
        }
        EXPECT_EQ(distinct, 32) << name << " " << what << " half " << h;
      }
    }
  };
  for (int ks = 0; ks < T::BK / 16; ++ks) {
    for (int row0 = 0; row0 < T::BM; row0 += 16)
      for (int i = 0; i < 4; ++i)
        check(!TA, [&](int lane, int h) {
          int r, k;
          mma16_a_at(lane, i, h, r, k);
          return S::a_at(row0 + r, ks * 16 + k);
        }, TA ? "Aᵀ" : "A");
    for (int col0 = 0; col0 < T::BN; col0 += 8)
      for (int i = 0; i < 2; ++i)
        check(TB, [&](int lane, int h) {
          int k, c;
          mma16_b_at(lane, i, h, k, c);
          return S::b_at(ks * 16 + k, col0 + c);
        }, TB ? "Bᵀ" : "B");
  }
}

template <class T>
void expect_bf16_conflict_free_all(const char* name) {
  expect_bf16_conflict_free<T, false, false>(name);
  expect_bf16_conflict_free<T, false, true>(name);
  expect_bf16_conflict_free<T, true, false>(name);
  expect_bf16_conflict_free<T, true, true>(name);
}

TEST(CodecGemmFragments, SharedMemoryReadsAreFreeOfBankConflicts) {
  expect_bf16_conflict_free_all<GemmLarge>("bf16 large");
  expect_bf16_conflict_free_all<GemmSmall>("bf16 small");
  expect_bf16_conflict_free_all<GemmThin8>("bf16 thin8");
  expect_bf16_conflict_free_all<GemmThin16>("bf16 thin16");
  expect_bf16_conflict_free_all<GemmThin32>("bf16 thin32");
  expect_conflict_free_all<GemmLarge>("large");
  expect_conflict_free_all<GemmSmall>("small");
  expect_conflict_free_all<GemmThin8>("thin8");
  expect_conflict_free_all<GemmThin16>("thin16");
  expect_conflict_free_all<GemmThin32>("thin32");
}

// ---- TF32 ---------------------------------------------------------------------------------------

// Calls f(x) for the finite floats among n random bit patterns of seed; returns how many.
template <class F>
int for_random_finite_floats(uint32_t seed, int n, F f) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  int finite = 0;
  for (int i = 0; i < n; ++i) {
    float x;
    const uint32_t u = any_bits(rng);
    std::memcpy(&x, &u, sizeof x);
    if (!std::isfinite(x)) continue;
    f(x);
    ++finite;
  }
  return finite;
}

TEST(CodecGemmTf32, RoundingKeepsTenMantissaBitsNearestTiesAway) {
  // Ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(tf32_round(1.0f + std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(tf32_round(-1.0f - std::ldexp(1.0f, -11)), -1.0f - std::ldexp(1.0f, -10));
  EXPECT_EQ(tf32_round(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -23)), 1.0f);
  EXPECT_EQ(tf32_round(std::ldexp(1.0f, -12) * 3.0f), std::ldexp(1.0f, -12) * 3.0f);  // exact stays
  EXPECT_EQ(bits(tf32_round(-0.0f)), bits(-0.0f));
  EXPECT_EQ(tf32_round(INFINITY), INFINITY);
  EXPECT_EQ(tf32_round(3.4028235e38f), INFINITY);  // rounds past the largest TF32 value
  EXPECT_TRUE(std::isnan(tf32_round(NAN)));
  const int checked = for_random_finite_floats(3, 200000, [](float x) {
    const float hi = tf32_round(x);
    ASSERT_EQ(bits(hi) & 0x1fffu, 0u) << x;
    ASSERT_EQ(bits(hi), bits(tf32_reference(x))) << x;
    if (std::isfinite(hi) && std::fabs(x) >= 1e-37f) {
      ASSERT_LE(std::fabs(static_cast<double>(x) - hi), std::ldexp(std::fabs(static_cast<double>(x)), -11)) << x;
    }
  });
  EXPECT_GT(checked, 190000);
}

TEST(CodecGemmTf32, SplitRecoversTheValueToTwoPowMinus22) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-100, 100);
  double worst = 0;
  for (int n = 0; n < 200000; ++n) {
    const float x = std::ldexp(mant(rng), expo(rng)) * (n % 2 ? -1.0f : 1.0f);
    float hi, lo;
    tf32_split(x, hi, lo);
    ASSERT_EQ(bits(hi) & 0x1fffu, 0u);
    ASSERT_EQ(bits(lo) & 0x1fffu, 0u);
    ASSERT_LE(std::fabs(lo), std::ldexp(std::fabs(x), -11)) << x;
    const double rest = std::fabs(static_cast<double>(x) - hi - lo) / std::fabs(static_cast<double>(x));
    worst = std::max(worst, rest);
  }
  EXPECT_LE(worst, std::ldexp(1.0, -22));
  EXPECT_GT(worst, std::ldexp(1.0, -26));  // the split is not exact: lo itself is rounded
}

// ---- bf16 ----------------------------------------------------------------------------------------

TEST(CodecGemmBf16, RoundingKeepsEightSignificantBitsNearestTiesEven) {
  EXPECT_EQ(bf16_round_host(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // a tie, to the even 1
  EXPECT_EQ(bf16_round_host(1.0f + 3.0f * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));  // a tie, up to even
  EXPECT_EQ(bf16_round_host(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bits(bf16_round_host(-0.0f)), bits(-0.0f));
  EXPECT_EQ(bf16_round_host(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(bf16_round_host(NAN)));
  const int checked = for_random_finite_floats(5, 200000, [](float x) {
    const float r = bf16_round_host(x);
    ASSERT_EQ(bits(r) & 0xffffu, 0u) << x;
    ASSERT_EQ(bits(r), bits(bf16_reference(x))) << x;
  });
  EXPECT_GT(checked, 190000);
}

// ---- the GEMM's data flow ---------------------------------------------------------------------

// cp.async on the host: copies src_bytes and zero-fills the rest. Counts 16-byte copies whose
// source or destination is not 16-byte aligned (the device would fault).
struct HostCopy {
  const float* smem = nullptr;
  int misaligned = 0, vector_copies = 0;
  void operator()(float* dst, const float* src, int bytes, int src_bytes) {
    ASSERT_TRUE(bytes == 16 || bytes == 4);
    ASSERT_TRUE(src_bytes >= 0 && src_bytes <= bytes && src_bytes % 4 == 0);
    if (bytes == 16) {
      ++vector_copies;
      if ((dst - smem) % 4 != 0 || (src_bytes > 0 && (reinterpret_cast<uintptr_t>(src) & 15u) != 0)) ++misaligned;
    }
    if (src_bytes > 0) std::memcpy(dst, src, static_cast<size_t>(src_bytes));
    std::memset(reinterpret_cast<char*>(dst) + src_bytes, 0, static_cast<size_t>(bytes - src_bytes));
  }
};

// The kernel on the host (run_grid walks the blocks, chunk ends and stores): per stage every
// thread's copies (the stage first filled with NaN, so that a read of a slot no copy wrote shows),
// then every warp's k-steps, lane by lane through the header's fragment reads and split, the mma
// on the model. group: chunks per block (0: all of them, added in the block).
template <class T, bool TA, bool TB, GemmPrecision P>
std::vector<float> emulate(const Problem& p, bool allow_vectors, HostCopy& copy, int64_t group) {
  using S = GemmStage<T, TA, TB, P>;
  std::vector<float> stage(S::floats);
  copy.smem = stage.data();
  const bool va = allow_vectors && gemm_vector_ok(p.A.data(), p.lda);
  const bool vb = allow_vectors && gemm_vector_ok(p.B.data(), p.ldb);
  auto fill = [&](const GemmArgs& g, int64_t m0, int64_t n0, int64_t k0, int64_t, int64_t ke) {
    std::fill(stage.begin(), stage.end(), NAN);
    for (int tid = 0; tid < T::kThreads; ++tid)
      gemm_load_stage<T, TA, TB, P>(g, stage.data(), m0, n0, k0, ke, tid, va, vb, copy);
  };
  auto multiply = [&](int row0, int col0, int steps, WarpAcc<T>& acc) {
    for (int ks = 0; ks < steps; ++ks)
      for (int i = 0; i < T::MT; ++i)
        for (int j = 0; j < T::NT; ++j) {
          if constexpr (P == GemmPrecision::kBf16) {
            float a[32][8], b[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              gemm_frag_a16<T, TA, TB>(stage.data(), lane, row0 + i * 16, ks * 16, a[lane]);
              gemm_frag_b16<T, TA, TB>(stage.data(), lane, col0 + j * 8, ks * 16, b[lane]);
              for (float& x : a[lane]) x = bf16_round_host(x);
              for (float& x : b[lane]) x = bf16_round_host(x);
            }
            mma16_model(acc.v[i][j], a, b);
            continue;
          }
          float a_hi[32][4], a_lo[32][4], b_hi[32][2], b_lo[32][2];
          for (int lane = 0; lane < 32; ++lane) {
            float a[4], b[2];
            gemm_frag_a<T, TA, TB>(stage.data(), lane, row0 + i * 16, ks * 8, a);
            gemm_frag_b<T, TA, TB>(stage.data(), lane, col0 + j * 8, ks * 8, b);
            for (int q = 0; q < 4; ++q) tf32_split(a[q], a_hi[lane][q], a_lo[lane][q]);
            for (int q = 0; q < 2; ++q) tf32_split(b[q], b_hi[lane][q], b_lo[lane][q]);
          }
          float (&d)[32][4] = acc.v[i][j];
          mma_model(d, a_lo, b_hi);
          mma_model(d, a_hi, b_lo);
          mma_model(d, a_hi, b_hi);
        }
  };
  return run_grid<T>(p, P, group, fill, multiply);
}

template <class T, GemmPrecision P = GemmPrecision::kF32>
std::vector<float> emulate_any(const Problem& p, bool allow_vectors, HostCopy& copy, int64_t group = 0) {
  if (p.ta && p.tb) return emulate<T, true, true, P>(p, allow_vectors, copy, group);
  if (p.ta) return emulate<T, true, false, P>(p, allow_vectors, copy, group);
  if (p.tb) return emulate<T, false, true, P>(p, allow_vectors, copy, group);
  return emulate<T, false, false, P>(p, allow_vectors, copy, group);
}

// Every tile shape in both precisions (check_tile_cases); the cp.async copies all aligned.
template <class T, GemmPrecision P>
void check_tile_in(const char* name, const std::vector<Shape>& shapes, uint32_t seed) {
  check_tile_cases<HostCopy>(
      name, P, shapes, seed,
      [](const Problem& p, HostCopy& copy, int64_t group) { return emulate_any<T, P>(p, true, copy, group); },
      [](const HostCopy& copy) { EXPECT_EQ(copy.misaligned, 0); });
}

template <class T>
void check_tile(const char* name, const std::vector<Shape>& shapes, uint32_t seed) {
  check_tile_in<T, GemmPrecision::kF32>(name, shapes, seed);
  check_tile_in<T, GemmPrecision::kBf16>(name, shapes, seed);
}

// Ragged edges against the tile, K within a chunk, not a multiple of the stage depth or of 8, on a
// chunk boundary, over several chunks (a short last one), and K = 0 (C = beta·C0).
TEST(CodecGemmEmulation, ThinTilesFollowTheContract) {
  check_tile<GemmThin8>("thin8", {{1, 1, 1}, {17, 5, 77}, {40, 8, 1030}, {3, 7, 0}}, 10);
  check_tile<GemmThin16>("thin16", {{16, 16, 64}, {33, 12, 131}, {5, 9, 1024}}, 20);
  check_tile<GemmThin32>("thin32", {{1, 70, 37}, {20, 33, 1100}, {16, 32, 8}}, 30);
}

TEST(CodecGemmEmulation, SmallTilesFollowTheContract) {
  check_tile<GemmSmall>("small", {{70, 65, 45}, {64, 64, 1025}, {5, 130, 8}, {65, 1, 0}}, 40);
}

TEST(CodecGemmEmulation, LargeTilesFollowTheContract) {
  check_tile<GemmLarge>("large", {{130, 129, 67}, {128, 128, 32}, {20, 140, 1027}}, 50);
}

// A stream's columns multiplied among many others give the same bits as alone (and a row likewise),
// whatever the tiles: C restricted to columns [c0, c0 + w) equals the product with only those
// columns of B, on another tile shape.
TEST(CodecGemmEmulation, AColumnsResultDoesNotDependOnTheOtherColumns) {
  for (bool tb : {false, true}) {
    const Problem all = make_problem(false, tb, 40, 150, 1100, 0.0f, tb ? 5 : 6);
    HostCopy copy;
    const std::vector<float> full = emulate_any<GemmLarge>(all, true, copy);
    for (auto [c0, w] : {std::pair<int64_t, int64_t>{0, 1}, {17, 40}, {120, 30}, {129, 1}}) {
      Problem part = all;
      part.N = w;
      part.ldc = w;
      part.C0.assign(static_cast<size_t>(part.M * w), 0.0f);
      part.ldb = tb ? all.K : w;
      part.B.assign(static_cast<size_t>((tb ? w : all.K) * part.ldb), 0.0f);
      for (int64_t k = 0; k < all.K; ++k)
        for (int64_t n = 0; n < w; ++n) (tb ? part.B[n * part.ldb + k] : part.B[k * part.ldb + n]) = all.b(k, c0 + n);
      const std::vector<float> alone =
          w <= 32 ? emulate_any<GemmThin32>(part, true, copy) : emulate_any<GemmSmall>(part, true, copy);
      int64_t differing = 0;
      for (int64_t m = 0; m < all.M; ++m)
        for (int64_t n = 0; n < w; ++n)
          differing += bits(alone[static_cast<size_t>(m * w + n)]) != bits(full[static_cast<size_t>(m * all.ldc + c0 + n)]);
      EXPECT_EQ(differing, 0) << "columns " << c0 << " + " << w << " tb=" << tb;
    }
  }
}

TEST(CodecGemmEmulation, ChunksAndStepsDependOnKAlone) {
  // bf16 steps of 16: a stage of 32 k holds two, a ragged end one per 16 k begun.
  EXPECT_EQ((gemm_stage_steps<GemmLarge, GemmPrecision::kBf16>(0, 1000)), 2);
  EXPECT_EQ((gemm_stage_steps<GemmLarge, GemmPrecision::kBf16>(992, 1000)), 1);
  EXPECT_EQ((gemm_stage_steps<GemmLarge, GemmPrecision::kBf16>(976, 1000)), 2);
  EXPECT_EQ((gemm_stage_steps<GemmLarge, GemmPrecision::kBf16>(960, 977)), 2);
  EXPECT_EQ(gemm_chunks(0), 1);
  EXPECT_EQ(gemm_chunks(kGemmKChunk), 1);
  EXPECT_EQ(gemm_chunks(kGemmKChunk + 1), 2);
  EXPECT_EQ(gemm_chunks(7 * kGemmKChunk), 7);
  EXPECT_EQ(gemm_chunk_steps(0), 0);
  EXPECT_EQ(gemm_chunk_steps(1), 1);
  EXPECT_EQ(gemm_chunk_steps(8), 1);
  EXPECT_EQ(gemm_chunk_steps(9), 2);
  // A stage runs its chunk's steps that hold a k, never more: the chunk's total is the same for
  // every stage depth (the tiles' 32 and a deeper 64), and a chunk's last stage is where the
  // chunk ends.
  using Deep = MmaTile<16, 8, 1, 1, 64, 3>;
  for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{33}, int64_t{64}, int64_t{65}, int64_t{200},
                      kGemmKChunk}) {
    int64_t deep = 0, large = 0;
    for (int64_t k0 = 0; k0 < len; k0 += Deep::BK) deep += gemm_stage_steps<Deep>(k0, len);
    for (int64_t k0 = 0; k0 < len; k0 += GemmLarge::BK) large += gemm_stage_steps<GemmLarge>(k0, len);
    EXPECT_EQ(deep, gemm_chunk_steps(len)) << len;
    EXPECT_EQ(large, gemm_chunk_steps(len)) << len;
  }
  // A group of chunks 2..4 of K = 1000 (k 512..1000): the stages ending chunks 2 and 3.
  int ends = 0;
  for (int64_t k0 = 2 * kGemmKChunk; k0 < 1000; k0 += GemmLarge::BK) {
    const bool end = gemm_stage_ends_chunk<GemmLarge>(k0, 1000);
    EXPECT_EQ(end, k0 + GemmLarge::BK == 3 * kGemmKChunk || k0 + GemmLarge::BK >= 1000) << k0;
    ends += end;
  }
  EXPECT_EQ(ends, 2);
  EXPECT_EQ(gemm_thin_width(1), 8);
  EXPECT_EQ(gemm_thin_width(9), 16);
  EXPECT_EQ(gemm_thin_width(17), 32);
  EXPECT_EQ(gemm_thin_width(5000), 32);
}

// The launch policy: a launch that spreads K's chunks over blocks never needs more scratch than
// gemm_partial_bound gives (the bound never shrinks as M or N grow, so a workspace sized by its
// largest shape serves every smaller one); a group is between one chunk and all of them; and a
// launch either reaches the warp target or cannot be spread further.
TEST(CodecGemmPolicy, SpreadLaunchesFitTheScratchAndReachTheTarget) {
  int spread = 0, whole = 0;
  for (int64_t sms : {8, 132})
    for (int64_t M : {1, 5, 16, 33, 96, 192, 384, 768, 1024, 1536, 12288})
      for (int64_t N : {1, 4, 32, 160, 640, 1920, 4096, 20480, 245760})
        for (int64_t K : {0, 96, 256, 257, 672, 1536, 5376, 7168}) {
          SCOPED_TRACE("sms " + std::to_string(sms) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                       " K=" + std::to_string(K));
          const int64_t chunks = gemm_chunks(K);
          const GemmTile tile = gemm_auto_tile(M, N, chunks, sms);
          const int64_t group = gemm_group(tile, M, N, chunks, sms);
          ASSERT_GE(group, 1);
          ASSERT_LE(group, chunks);
          const int64_t groups = (chunks + group - 1) / group;
          EXPECT_LE(gemm_partial_bound(M, N, K), gemm_partial_bound(2 * M, N, K));
          EXPECT_LE(gemm_partial_bound(M, N, K), gemm_partial_bound(M, 2 * N, K));
          if (group < chunks) {
            EXPECT_LE(chunks * M * N, gemm_partial_bound(M, N, K));
            ++spread;
          } else {
            ++whole;
          }
          const bool reaches = gemm_launch_warps(tile, M, N) * groups >= gemm_target_warps(sms);
          EXPECT_TRUE(reaches || group == 1 || !gemm_may_split(M, N, chunks));
        }
  EXPECT_GT(spread, 100);
  EXPECT_GT(whole, 100);
}

// One stream's decoder transformer (M = 1 row, N = 512, K = 1024) and its first vocoder conv1
// (M = 768, N = 32, K = 5376) on 132 SMs: every chunk in its own block, on tiles no wider than
// the target needs, so the launches have hundreds to thousands of warps (one warp per 16 × 32
// tile with the whole K per block would give 16 and 48).
TEST(CodecGemmPolicy, OneStreamsProductsAreSpreadOverTheChunks) {
  struct Case {
    int64_t M, N, K, min_warps;
  };
  for (const Case& c : {Case{1, 512, 1024, 256}, Case{768, 32, 5376, 2000}, Case{1024, 1, 1536, 384}}) {
    const int64_t chunks = gemm_chunks(c.K);
    const GemmTile tile = gemm_auto_tile(c.M, c.N, chunks, 132);
    const int64_t group = gemm_group(tile, c.M, c.N, chunks, 132);
    EXPECT_EQ(group, 1) << c.M << " " << c.N;
    EXPECT_GE(gemm_launch_warps(tile, c.M, c.N) * chunks, c.min_warps) << c.M << " " << c.N;
  }
}

// The order of a grid's tiles: the blocks of a grid (dispatched x first, then y) take every tile
// exactly once, and the row tiles of one column tile are dispatched one after another (so a
// column tile of B is read while the L2 still holds it).
TEST(CodecGemmPolicy, BlocksTakeEveryTileOnceWithAColumnsRowTilesTogether) {
  const std::pair<int64_t, int64_t> grids[] = {{1, 1}, {1, 1920}, {3, 640}, {6, 32}, {64, 1}, {7, 5}};
  for (auto [row_tiles, col_tiles] : grids) {
    SCOPED_TRACE(std::to_string(row_tiles) + " × " + std::to_string(col_tiles));
    std::vector<int> taken(static_cast<size_t>(row_tiles * col_tiles), 0);
    // The grid as the launchers shape it: x over column tiles, y over row tiles.
    for (int64_t y = 0; y < row_tiles; ++y)
      for (int64_t x = 0; x < col_tiles; ++x) {
        const int64_t order = y * col_tiles + x;
        int64_t m = -1, n = -1;
        gemm_tile_of_block(order, row_tiles, m, n);
        ASSERT_TRUE(m >= 0 && m < row_tiles && n >= 0 && n < col_tiles);
        ++taken[static_cast<size_t>(m * col_tiles + n)];
        EXPECT_EQ(n, order / row_tiles) << "block " << order << " is off its column tile's run";
      }
    for (int t : taken) ASSERT_EQ(t, 1);
  }
}

}  // namespace
}  // namespace chorus::cuda::codec_ops
