// The codec's batch-invariant GEMM on the device (runtime/cuda/conv_ops.h): the tile kernels and
// the skinny kernels (N or M <= kGemmSkinnyMaxN), each forced through gemm_on_path, must give the same
// bits on the same inputs, and those bits must be the promised arithmetic written out here on the
// host (per chunk one fma chain in ascending k padded to kGemmKPad terms, chunk sums added in
// order, then the epilogue), which a double-precision product bounds so that the check is not
// vacuous. Columns of C beyond N must stay untouched.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "gpu_test_util.h"
#include "runtime/cuda/conv_ops.h"

namespace chorus::gpu_test {
namespace {

namespace ops = cuda::codec_ops;

struct Problem {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> A, B, C0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float a(int64_t m, int64_t k) const { return ta ? A[k * lda + m] : A[m * lda + k]; }
  float b(int64_t k, int64_t n) const { return tb ? B[n * ldb + k] : B[k * ldb + n]; }
};

Problem make_problem(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.ta = ta;
  p.tb = tb;
  p.M = M;
  p.N = N;
  p.K = K;
  p.alpha = alpha;
  p.beta = beta;
  p.lda = (ta ? M : K) + 1;
  p.ldb = (tb ? K : N) + 3;
  p.ldc = N + 2;
  p.A = random_vec(rng, static_cast<size_t>((ta ? K : M) * p.lda));
  p.B = random_vec(rng, static_cast<size_t>((tb ? N : K) * p.ldb));
  p.C0 = random_vec(rng, static_cast<size_t>(M * p.ldc));
  return p;
}

// The promised arithmetic on the host (std::fma and f32 operations round exactly as the device's).
std::vector<float> host_chain(const Problem& p) {
  std::vector<float> C = p.C0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      float sum = 0.0f;
      for (int64_t s = 0; s < ops::gemm_splits(p.K); ++s) {
        const int64_t k0 = s * ops::kGemmKChunk, k1 = std::min(p.K, k0 + ops::kGemmKChunk);
        const int64_t padded = k0 + (k1 - k0 + ops::kGemmKPad - 1) / ops::kGemmKPad * ops::kGemmKPad;
        float acc = 0.0f;
        for (int64_t k = k0; k < padded; ++k) acc = k < k1 ? std::fma(p.a(m, k), p.b(k, n), acc) : std::fma(0.0f, 0.0f, acc);
        sum = s == 0 ? acc : sum + acc;
      }
      float v = p.alpha == 1.0f ? sum : p.alpha * sum;
      if (p.beta != 0.0f) v = v + p.beta * p.C0[static_cast<size_t>(m * p.ldc + n)];
      C[static_cast<size_t>(m * p.ldc + n)] = v;
    }
  return C;
}

// max |C − exact| / Σ|terms| over [M, N).
double relative_error(const Problem& p, const std::vector<float>& C) {
  double worst = 0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      double exact = 0, mag = 1e-30;
      for (int64_t k = 0; k < p.K; ++k) {
        const double t = static_cast<double>(p.a(m, k)) * p.b(k, n);
        exact += t;
        mag += std::fabs(t);
      }
      const double c0 = p.C0[static_cast<size_t>(m * p.ldc + n)];
      exact = p.alpha * exact + p.beta * c0;
      mag = std::fabs(p.alpha) * mag + std::fabs(p.beta * c0);
      const double e = std::fabs(C[static_cast<size_t>(m * p.ldc + n)] - exact) / mag;
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  return worst;
}

std::vector<float> run_on(ops::GemmPath path, const Problem& p) {
  const cuda::DeviceBuffer A = to_device(p.A), B = to_device(p.B), C = to_device(p.C0);
  const size_t pf = ops::gemm_partial_floats(p.M, p.N, p.K);
  const cuda::DeviceBuffer partial = poisoned(std::max<size_t>(pf, 1));
  const Status s = ops::gemm_on_path(path, p.ta, p.tb, p.M, p.N, p.K, p.alpha, A.as<const float>(), p.lda,
                                     B.as<const float>(), p.ldb, p.beta, C.as<float>(), p.ldc, partial.as<float>(), pf,
                                     nullptr);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return to_host<float>(C, p.C0.size());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

TEST(GpuCodecGemm, SkinnyAndTileKernelsGiveTheSameBits) {
  REQUIRE_GPU();
  struct Shape {
    int64_t M, N, K;
  };
  // N = 1 and around each skinny width; K within a chunk, ragged against the stage depths and the
  // pad granule, on a chunk boundary, over several chunks, and 0; M over several row blocks.
  const Shape shapes[] = {{1, 1, 1},     {300, 1, 2500}, {64, 4, 37},   {129, 8, 1024}, {33, 9, 1025},
                          {300, 17, 40}, {96, 32, 3000}, {70, 33, 130}, {257, 64, 2049}, {40, 5, 0}};
  int cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 0.5f}) {
        const Problem p = make_problem(layout & 1, layout & 2, s.M, s.N, s.K, cases % 3 == 1 ? 0.75f : 1.0f, beta,
                                       static_cast<uint32_t>(500 + cases));
        SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                     " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " beta=" + std::to_string(beta));
        const std::vector<float> want = host_chain(p);
        const std::vector<float> tiles = run_on(ops::GemmPath::kTiles, p), skinny = run_on(ops::GemmPath::kSkinny, p),
                                 picked = run_on(ops::GemmPath::kAuto, p);
        EXPECT_LT(relative_error(p, tiles), 1e-4);
        EXPECT_EQ(differing(tiles, want), 0) << "tile kernel differs from the host chain";
        EXPECT_EQ(differing(skinny, tiles), 0) << "skinny kernel differs from the tile kernel";
        EXPECT_TRUE(same_bits(picked, tiles)) << "gemm's own choice differs";
        ++cases;
      }
  EXPECT_EQ(cases, 80);
}

// Few rows (M <= kGemmSkinnyMaxN, N wide): the skinny kernel on the transposed product
// (kSkinnyRows) gives the tile kernel's bits, written into C's own layout.
TEST(GpuCodecGemm, SkinnyRowsAndTileKernelsGiveTheSameBits) {
  REQUIRE_GPU();
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 65, 1},      {1, 300, 2500}, {4, 129, 37},   {8, 1000, 1024},
                          {17, 100, 1025}, {33, 257, 40},  {64, 96, 3000}, {5, 80, 0}};
  int cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 0.5f}) {
        const Problem p = make_problem(layout & 1, layout & 2, s.M, s.N, s.K, cases % 3 == 2 ? -1.5f : 1.0f, beta,
                                       static_cast<uint32_t>(900 + cases));
        SCOPED_TRACE("M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                     " ta=" + std::to_string(p.ta) + " tb=" + std::to_string(p.tb) + " beta=" + std::to_string(beta));
        const std::vector<float> want = host_chain(p);
        const std::vector<float> tiles = run_on(ops::GemmPath::kTiles, p),
                                 rows = run_on(ops::GemmPath::kSkinnyRows, p), picked = run_on(ops::GemmPath::kAuto, p);
        EXPECT_LT(relative_error(p, rows), 1e-4);
        EXPECT_EQ(differing(tiles, want), 0) << "tile kernel differs from the host chain";
        EXPECT_EQ(differing(rows, tiles), 0) << "skinny kernel (rows) differs from the tile kernel";
        EXPECT_TRUE(same_bits(picked, tiles)) << "gemm's own choice differs";
        ++cases;
      }
  EXPECT_EQ(cases, 64);
}

// Codec-like shapes of one stream and one frame: a conv of 1024 channels with kernel 7 at N = 1, a
// transposed conv's product (A stored transposed) at N = 2, a conv at N = 32, and the decoder
// transformer's qkv and down projections of one row (weights stored [N, K]).
TEST(GpuCodecGemm, SkinnyKernelMatchesTheTilesOnCodecShapes) {
  REQUIRE_GPU();
  for (auto [ta, tb, M, N, K] : {std::tuple<bool, bool, int64_t, int64_t, int64_t>{false, false, 1024, 1, 7168},
                                 {true, false, 4096, 2, 1024},
                                 {false, false, 96, 32, 3 * 96},
                                 {false, true, 1, 3072, 512},
                                 {false, true, 1, 512, 1024}}) {
    const Problem p = make_problem(ta, tb, M, N, K, 1.0f, 0.0f, static_cast<uint32_t>(M + N));
    const ops::GemmPath path = N <= ops::kGemmSkinnyMaxN ? ops::GemmPath::kSkinny : ops::GemmPath::kSkinnyRows;
    const std::vector<float> tiles = run_on(ops::GemmPath::kTiles, p), skinny = run_on(path, p);
    EXPECT_LT(relative_error(p, skinny), 1e-4) << M << "x" << N << "x" << K;
    EXPECT_EQ(differing(skinny, tiles), 0) << M << "x" << N << "x" << K;
  }
}

// Products that underflow to −0 leave a −0 chunk sum; the zero terms padding a chunk to a multiple
// of kGemmKPad turn it into +0 — on the device too (the compiler must not drop them), in both
// kernels: K = 3 and 1027 pad (+0), K = 40 and 1064 do not (−0).
TEST(GpuCodecGemm, BothKernelsPadTheChainAlike) {
  REQUIRE_GPU();
  for (auto [K, negative] : {std::pair<int64_t, bool>{3, false}, {40, true}, {1027, false}, {1064, true}}) {
    Problem p = make_problem(false, false, 40, 3, K, 1.0f, 0.0f, 1);
    for (float& v : p.A) v = -1e-30f;
    for (float& v : p.B) v = 1e-30f;
    for (ops::GemmPath path : {ops::GemmPath::kTiles, ops::GemmPath::kSkinny, ops::GemmPath::kSkinnyRows}) {
      const std::vector<float> C = run_on(path, p);
      int64_t wrong = 0;
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t n = 0; n < p.N; ++n) {
          const float v = C[static_cast<size_t>(m * p.ldc + n)];
          wrong += v != 0.0f || std::signbit(v) != negative;
        }
      EXPECT_EQ(wrong, 0) << "K=" << K << " path=" << static_cast<int>(path);
    }
  }
}

TEST(GpuCodecGemm, SkinnyPathsRefuseWideShapes) {
  REQUIRE_GPU();
  const Problem p = make_problem(false, false, 8, ops::kGemmSkinnyMaxN + 1, 8, 1.0f, 0.0f, 2);
  const cuda::DeviceBuffer A = to_device(p.A), B = to_device(p.B), C = to_device(p.C0);
  const Status s = ops::gemm_on_path(ops::GemmPath::kSkinny, false, false, p.M, p.N, p.K, 1.0f, A.as<const float>(),
                                     p.lda, B.as<const float>(), p.ldb, 0.0f, C.as<float>(), p.ldc, nullptr, 0, nullptr);
  EXPECT_FALSE(s.ok());
  const Status r = ops::gemm_on_path(ops::GemmPath::kSkinnyRows, true, true, p.N, p.M, p.K, 1.0f, B.as<const float>(),
                                     p.ldb, A.as<const float>(), p.lda, 0.0f, C.as<float>(), p.ldc, nullptr, 0, nullptr);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace chorus::gpu_test
