// The GPU codec's batch-invariant GEMM (runtime/cuda/codec_elements.h), its tiles run on the CPU:
// every block of the grid and every thread of a block through the same per-thread functions the
// CUDA kernel calls, stage by stage (load all threads, then multiply-accumulate all threads, as
// the kernel's barriers order them). Checked against a double-precision product (the semantics:
// transposes, leading dimensions, alpha/beta, ragged edges, K over several chunks), bit for bit
// against an fmaf chain per chunk written out here (the promised arithmetic), and bit for bit
// across tile shapes, between the tiles and the skinny (small-N) kernels, and across column
// subsets (what makes a stream's samples independent of the other streams of a batch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cuda/codec_elements.h"

namespace chorus::cuda::codec_ops {
namespace {

// A row-major problem C = alpha·op(A)·op(B) + beta·C0 with padded leading dimensions.
struct Problem {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> A, B, C0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

Problem make_problem(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Problem p;
  p.ta = ta;
  p.tb = tb;
  p.M = M;
  p.N = N;
  p.K = K;
  p.beta = beta;
  p.lda = (ta ? M : K) + 3;
  p.ldb = (tb ? K : N) + 5;
  p.ldc = N + 2;
  p.A.resize(static_cast<size_t>((ta ? K : M) * p.lda));
  p.B.resize(static_cast<size_t>((tb ? N : K) * p.ldb));
  p.C0.resize(static_cast<size_t>(M * p.ldc));
  for (auto* v : {&p.A, &p.B, &p.C0})
    for (float& x : *v) x = d(rng);
  return p;
}

float a_at(const Problem& p, int64_t m, int64_t k) { return p.ta ? p.A[k * p.lda + m] : p.A[m * p.lda + k]; }
float b_at(const Problem& p, int64_t k, int64_t n) { return p.tb ? p.B[n * p.ldb + k] : p.B[k * p.ldb + n]; }

// Runs the kernel's per-thread functions over the whole grid, as gemm() launches them.
template <class T>
std::vector<float> emulate(const Problem& p) {
  std::vector<float> C = p.C0;
  GemmArgs g;
  g.M = p.M;
  g.N = p.N;
  g.K = p.K;
  g.alpha = p.alpha;
  g.beta = p.beta;
  g.A = p.A.data();
  g.lda = p.lda;
  g.B = p.B.data();
  g.ldb = p.ldb;
  g.C = C.data();
  g.ldc = p.ldc;
  g.splits = gemm_splits(p.K);
  std::vector<float> partial(static_cast<size_t>(g.splits * p.M * p.N), NAN);
  if (g.splits > 1) g.partial = partial.data();
  struct Acc {
    float v[T::TM][T::TN];
  };
  std::vector<Acc> acc(T::kThreads);
  std::vector<float> As(T::kSmemA), Bs(T::kSmemB);
  for (int64_t split = 0; split < g.splits; ++split)
    for (int64_t m0 = 0; m0 < p.M; m0 += T::BM)
      for (int64_t n0 = 0; n0 < p.N; n0 += T::BN) {
        for (Acc& a : acc) std::memset(a.v, 0, sizeof(a.v));
        int64_t kb = 0, ke = 0;
        gemm_chunk(g, split, kb, ke);
        for (int64_t k0 = kb; k0 < ke; k0 += T::BK) {
          for (int tid = 0; tid < T::kThreads; ++tid) {
            if (p.ta && p.tb) gemm_load_stage<T, true, true>(g, As.data(), Bs.data(), m0, n0, k0, ke, tid);
            else if (p.ta) gemm_load_stage<T, true, false>(g, As.data(), Bs.data(), m0, n0, k0, ke, tid);
            else if (p.tb) gemm_load_stage<T, false, true>(g, As.data(), Bs.data(), m0, n0, k0, ke, tid);
            else gemm_load_stage<T, false, false>(g, As.data(), Bs.data(), m0, n0, k0, ke, tid);
          }
          for (int tid = 0; tid < T::kThreads; ++tid) gemm_mac_stage<T>(As.data(), Bs.data(), acc[static_cast<size_t>(tid)].v, tid);
        }
        for (int tid = 0; tid < T::kThreads; ++tid) gemm_store<T>(g, acc[static_cast<size_t>(tid)].v, m0, n0, split, tid);
      }
  if (g.splits > 1)
    for (int64_t i = 0; i < p.M * p.N; ++i) gemm_reduce_element(g, i);
  return C;
}

// Runs the skinny kernel's per-thread functions over its grid (one block per 32 rows and chunk,
// all N columns), as gemm_on_path launches them: each thread's registers fetched for a stage, put
// into shared memory, then multiplied for the stage's gemm_stage_steps terms.
// `rows`: as gemm runs it for few rows, on the transposed product (gemm_swapped).
template <class T>
std::vector<float> emulate_skinny(const Problem& p, bool rows = false) {
  std::vector<float> C = p.C0;
  GemmArgs g;
  g.M = p.M;
  g.N = p.N;
  g.K = p.K;
  g.alpha = p.alpha;
  g.beta = p.beta;
  g.A = p.A.data();
  g.lda = p.lda;
  g.B = p.B.data();
  g.ldb = p.ldb;
  g.C = C.data();
  g.ldc = p.ldc;
  g.splits = gemm_splits(p.K);
  const bool ta = rows ? !p.tb : p.ta, tb = rows ? !p.ta : p.tb;
  if (rows) g = gemm_swapped(g);
  EXPECT_LE(g.N, T::BN);
  std::vector<float> partial(static_cast<size_t>(g.splits * p.M * p.N), NAN);
  if (g.splits > 1) g.partial = partial.data();
  struct Thread {
    float acc[T::TM][T::TN];
    float ra[T::kPerA], rb[T::kPerB];
  };
  std::vector<Thread> th(T::kThreads);
  std::vector<float> As(T::kSmemA, NAN), Bs(T::kSmemB, NAN);
  for (int64_t split = 0; split < g.splits; ++split)
    for (int64_t m0 = 0; m0 < g.M; m0 += T::BM) {
      for (Thread& t : th) std::memset(t.acc, 0, sizeof(t.acc));
      int64_t kb = 0, ke = 0;
      gemm_chunk(g, split, kb, ke);
      for (int64_t k0 = kb; k0 < ke; k0 += T::BK) {
        for (int tid = 0; tid < T::kThreads; ++tid) {
          Thread& t = th[static_cast<size_t>(tid)];
          if (ta && tb) gemm_fetch_stage<T, true, true>(g, t.ra, t.rb, m0, 0, k0, ke, tid);
          else if (ta) gemm_fetch_stage<T, true, false>(g, t.ra, t.rb, m0, 0, k0, ke, tid);
          else if (tb) gemm_fetch_stage<T, false, true>(g, t.ra, t.rb, m0, 0, k0, ke, tid);
          else gemm_fetch_stage<T, false, false>(g, t.ra, t.rb, m0, 0, k0, ke, tid);
          if (ta && tb) gemm_put_stage<T, true, true>(As.data(), Bs.data(), t.ra, t.rb, tid);
          else if (ta) gemm_put_stage<T, true, false>(As.data(), Bs.data(), t.ra, t.rb, tid);
          else if (tb) gemm_put_stage<T, false, true>(As.data(), Bs.data(), t.ra, t.rb, tid);
          else gemm_put_stage<T, false, false>(As.data(), Bs.data(), t.ra, t.rb, tid);
        }
        const int steps = gemm_stage_steps<T>(k0, ke);
        for (int tid = 0; tid < T::kThreads; ++tid)
          gemm_mac_stage<T>(As.data(), Bs.data(), th[static_cast<size_t>(tid)].acc, tid, steps);
      }
      for (int tid = 0; tid < T::kThreads; ++tid)
        gemm_store<T>(g, th[static_cast<size_t>(tid)].acc, m0, 0, split, tid);
    }
  if (g.splits > 1)
    for (int64_t i = 0; i < g.M * g.N; ++i) gemm_reduce_element(g, i);
  return C;
}

// The skinny kernel that gemm picks for N columns (or, `rows`, for M rows).
std::vector<float> emulate_skinny_for(const Problem& p, bool rows = false) {
  const int64_t narrow = rows ? p.M : p.N;
  if (narrow <= GemmSkinny8::BN) return emulate_skinny<GemmSkinny8>(p, rows);
  if (narrow <= GemmSkinny32::BN) return emulate_skinny<GemmSkinny32>(p, rows);
  return emulate_skinny<GemmSkinny64>(p, rows);
}

// The promised arithmetic, written out: per chunk of kGemmKChunk, one fma chain from 0 in
// ascending k; chunk sums added in order; alpha then beta·C0 added, each rounded.
std::vector<float> fma_chain(const Problem& p) {
  std::vector<float> C = p.C0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      float sum = 0.0f;
      bool first = true;
      for (int64_t k0 = 0; first || k0 < p.K; k0 += kGemmKChunk) {
        float acc = 0.0f;
        for (int64_t k = k0; k < std::min(p.K, k0 + kGemmKChunk); ++k) acc = std::fma(a_at(p, m, k), b_at(p, k, n), acc);
        sum = first ? acc : sum + acc;
        first = false;
      }
      float v = p.alpha == 1.0f ? sum : p.alpha * sum;
      if (p.beta != 0.0f) v = v + p.beta * p.C0[static_cast<size_t>(m * p.ldc + n)];
      C[static_cast<size_t>(m * p.ldc + n)] = v;
    }
  return C;
}

// max |C − exact| / (Σ|terms| + |beta·C0|) over the written elements; elements outside [M, N)
// (the padding columns of ldc) must be untouched.
double relative_error(const Problem& p, const std::vector<float>& C) {
  double worst = 0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t c = 0; c < p.ldc; ++c) {
      const size_t at = static_cast<size_t>(m * p.ldc + c);
      if (c >= p.N) {
        if (std::memcmp(&C[at], &p.C0[at], sizeof(float)) != 0) return INFINITY;
        continue;
      }
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double t = static_cast<double>(a_at(p, m, k)) * b_at(p, k, c);
        exact += t;
        mag += std::fabs(t);
      }
      exact = p.alpha * exact + static_cast<double>(p.beta) * p.C0[at];
      mag = std::fabs(p.alpha) * mag + std::fabs(static_cast<double>(p.beta) * p.C0[at]) + 1e-30;
      const double e = std::fabs(C[at] - exact) / mag;
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  return worst;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CodecGemmEmulation, MatchesTheProductAndTheFmaChainInEveryLayout) {
  struct Shape {
    int64_t M, N, K;
  };
  // Ragged edges against both tiles, K within one chunk, on a chunk boundary, over three chunks,
  // and K not a multiple of the stage depth.
  const Shape shapes[] = {{1, 1, 1}, {70, 45, 37}, {129, 3, 1024}, {5, 130, 1025}, {33, 65, 2100}, {64, 64, 0}};
  int cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 1.0f}) {
        Problem p = make_problem(layout & 1, layout & 2, s.M, s.N, s.K, beta, static_cast<uint32_t>(11 + cases));
        if (cases % 3 == 1) p.alpha = 0.75f;
        const std::vector<float> want = fma_chain(p);
        const std::vector<float> small = emulate<GemmTileSmall>(p), large = emulate<GemmTileLarge>(p);
        const double err = relative_error(p, small);
        SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                     " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " beta=" + std::to_string(beta));
        // Sequential f32 sums of up to 2100 terms of magnitude <= 1: far below 1e-4 of Σ|terms|.
        EXPECT_LT(err, 1e-4);
        EXPECT_TRUE(same_bits(small, want)) << "small tile differs from the fma chain";
        EXPECT_TRUE(same_bits(large, want)) << "large tile differs from the fma chain";
        ++cases;
      }
  EXPECT_EQ(cases, 48);
}

// A stream's columns multiplied among many others give the same bits as alone: C restricted to
// columns [c0, c0 + w) equals the product with B restricted to those columns, whatever the tile.
TEST(CodecGemmEmulation, AColumnsResultDoesNotDependOnTheOtherColumns) {
  for (bool tb : {false, true}) {
    const Problem all = make_problem(false, tb, 96, 300, 2600, 0.0f, tb ? 5 : 6);
    const std::vector<float> full = emulate<GemmTileLarge>(all);
    for (auto [c0, w] : {std::pair<int64_t, int64_t>{0, 1}, {17, 40}, {250, 50}, {129, 1}}) {
      Problem part = all;
      part.N = w;
      part.ldc = w;
      part.C0.assign(static_cast<size_t>(part.M * w), 0.0f);
      // The same columns at the start of a narrower B (its own layout, its own ld).
      part.ldb = tb ? all.K : w;
      part.B.assign(static_cast<size_t>((tb ? w : all.K) * part.ldb), 0.0f);
      for (int64_t k = 0; k < all.K; ++k)
        for (int64_t n = 0; n < w; ++n)
          (tb ? part.B[n * part.ldb + k] : part.B[k * part.ldb + n]) = b_at(all, k, c0 + n);
      const std::vector<float> alone = emulate<GemmTileSmall>(part);
      int64_t differing = 0;
      for (int64_t m = 0; m < all.M; ++m)
        for (int64_t n = 0; n < w; ++n)
          differing += std::memcmp(&alone[m * w + n], &full[m * all.ldc + c0 + n], sizeof(float)) != 0;
      EXPECT_EQ(differing, 0) << "columns " << c0 << " + " << w << " tb=" << tb;
    }
  }
}

// The skinny kernels (N <= kGemmSkinnyMaxN) give the tile kernel's bits in every layout: N = 1
// and on/around each skinny width, K within a chunk, not a multiple of the stage depth (64) or of
// the pad granule (8), on a chunk boundary, over several chunks, and K = 0.
TEST(CodecGemmEmulation, SkinnyKernelsMatchTheTilesBitForBit) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 1, 1},     {70, 1, 37},   {33, 8, 1024},  {100, 9, 1025}, {31, 32, 40},
                          {65, 33, 2100}, {40, 64, 130}, {7, 64, 3073}, {32, 5, 0},     {97, 2, 1500}};
  int cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 1.0f}) {
        Problem p = make_problem(layout & 1, layout & 2, s.M, s.N, s.K, beta, static_cast<uint32_t>(300 + cases));
        if (cases % 3 == 2) p.alpha = -1.25f;
        SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                     " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " beta=" + std::to_string(beta));
        const std::vector<float> tiles = emulate<GemmTileSmall>(p), skinny = emulate_skinny_for(p);
        EXPECT_LT(relative_error(p, skinny), 1e-4);  // not vacuous: both are the product
        EXPECT_TRUE(same_bits(skinny, tiles));
        // Every skinny width, not only the one gemm picks, must agree.
        if (s.N <= GemmSkinny32::BN) {
          EXPECT_TRUE(same_bits(emulate_skinny<GemmSkinny32>(p), tiles));
        }
        EXPECT_TRUE(same_bits(emulate_skinny<GemmSkinny64>(p), tiles));
        ++cases;
      }
  EXPECT_EQ(cases, 80);
}

// Few rows (the decoder transformer's rows of one frame against wide weights): the skinny kernels
// on the transposed product give the tile kernel's bits, C written in its own layout (the
// padding columns of ldc untouched, which relative_error checks).
TEST(CodecGemmEmulation, SkinnyKernelsOnTheTransposedProductMatchTheTiles) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 200, 37}, {8, 130, 1025}, {17, 70, 40}, {64, 100, 2100}, {3, 90, 0}};
  int cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 1.0f}) {
        Problem p = make_problem(layout & 1, layout & 2, s.M, s.N, s.K, beta, static_cast<uint32_t>(700 + cases));
        if (cases % 3 == 0) p.alpha = 0.5f;
        SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                     " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " beta=" + std::to_string(beta));
        const std::vector<float> tiles = emulate<GemmTileSmall>(p), skinny = emulate_skinny_for(p, true);
        EXPECT_LT(relative_error(p, skinny), 1e-4);
        EXPECT_TRUE(same_bits(skinny, tiles));
        ++cases;
      }
  EXPECT_EQ(cases, 48);
}

// Products that underflow to −0 make the chunk sum −0; the zero terms padding a chunk to a
// multiple of kGemmKPad turn it into +0. Both kernels must run exactly those terms: K = 3 pads
// (+0), K = 40 does not (−0, though 40 is not a multiple of the skinny stage depth).
TEST(CodecGemmEmulation, SkinnyKernelPadsTheChainLikeTheTiles) {
  for (auto [K, negative] : {std::pair<int64_t, bool>{3, false}, {40, true}, {1024 + 40, true}, {1024 + 3, false}}) {
    Problem p = make_problem(false, false, 5, 3, K, 0.0f, 9);
    for (float& v : p.A) v = -1e-30f;
    for (float& v : p.B) v = 1e-30f;
    const std::vector<float> tiles = emulate<GemmTileSmall>(p), skinny = emulate_skinny_for(p);
    EXPECT_TRUE(same_bits(skinny, tiles)) << "K=" << K;
    EXPECT_TRUE(same_bits(emulate_skinny_for(p, true), tiles)) << "K=" << K << " (rows)";
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t n = 0; n < p.N; ++n) {
        const float v = tiles[static_cast<size_t>(m * p.ldc + n)];
        EXPECT_EQ(v, 0.0f) << "K=" << K;
        EXPECT_EQ(std::signbit(v), negative) << "K=" << K;
      }
  }
}

TEST(CodecGemmEmulation, SplitsDependOnKAlone) {
  EXPECT_EQ(gemm_splits(0), 1);
  EXPECT_EQ(gemm_splits(kGemmKChunk), 1);
  EXPECT_EQ(gemm_splits(kGemmKChunk + 1), 2);
  EXPECT_EQ(gemm_splits(7 * kGemmKChunk), 7);
}

}  // namespace
}  // namespace chorus::cuda::codec_ops
