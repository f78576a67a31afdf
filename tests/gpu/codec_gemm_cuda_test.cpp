// The codec's batch-invariant GEMM on the device (runtime/cuda/conv_ops.h; the arithmetic in
// codec_elements.h: 3xTF32 mma, or one bf16 mma, in fixed k-steps per chunk), every test in both
// precisions. The tensor cores' accumulation is not IEEE-sequential, so the bits cannot be written
// out on the host; what is checked instead:
//   - every path (large, small and thin tiles, and gemm's own choice) gives the same bits on the
//     same inputs, and 16-byte and 4-byte staging give the same bits;
//   - the batch invariance itself: a row of C computed inside a large M equals, bit for bit, the
//     same row computed alone (M = 1) and at another position, and a set of columns likewise;
//   - accuracy at f32 level against a double-precision product: of the operands themselves (f32),
//     a bound that a single-TF32 chain (or a split missing a cross term) breaks on inputs whose
//     TF32 rounding errors add up; of the operands rounded to bf16 here (bf16), which a wrong
//     fragment layout, truncation instead of rounding, or f32 operands break;
//   - C's columns past N stay untouched, K = 0 gives the epilogue of a zero sum.
// The data flow (staging, fragments, k-steps, stores) is also run on the host against the
// contract: tests/runtime/codec_gemm_emulation_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "gpu_test_util.h"
#include "runtime/cuda/conv_ops.h"

namespace chorus::gpu_test {
namespace {

namespace ops = cuda::codec_ops;

struct Problem {
  ops::GemmPrecision precision = ops::GemmPrecision::kF32;
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> A, B, C0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float a(int64_t m, int64_t k) const { return ta ? A[k * lda + m] : A[m * lda + k]; }
  float b(int64_t k, int64_t n) const { return tb ? B[n * ldb + k] : B[k * ldb + n]; }
  float c0(int64_t m, int64_t n) const { return C0[static_cast<size_t>(m * ldc + n)]; }
  std::string name() const {
    return std::string(precision == ops::GemmPrecision::kBf16 ? "bf16" : "f32") + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " ta=" +
           std::to_string(ta) + " tb=" + std::to_string(tb) + " lda=" + std::to_string(lda) +
           " ldb=" + std::to_string(ldb) + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  }
};

using Fill = std::function<float(int64_t, int64_t)>;

// A problem with given values: a(m, k), b(k, n), c0(m, n); leading dimensions padded by pad_*.
Problem build(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Fill& a, const Fill& b, const Fill& c0,
              int64_t pad_a = 1, int64_t pad_b = 3) {
  Problem p;
  p.ta = ta;
  p.tb = tb;
  p.M = M;
  p.N = N;
  p.K = K;
  p.lda = (ta ? M : K) + pad_a;
  p.ldb = (tb ? K : N) + pad_b;
  p.ldc = N + 2;
  p.A.assign(static_cast<size_t>((ta ? K : M) * p.lda), 0.0f);
  p.B.assign(static_cast<size_t>((tb ? N : K) * p.ldb), 0.0f);
  p.C0.assign(static_cast<size_t>(M * p.ldc), 0.0f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) (ta ? p.A[k * p.lda + m] : p.A[m * p.lda + k]) = a(m, k);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) (tb ? p.B[n * p.ldb + k] : p.B[k * p.ldb + n]) = b(k, n);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < p.ldc; ++c) p.C0[static_cast<size_t>(m * p.ldc + c)] = c0(m, c);
  return p;
}

// A rows × cols matrix of uniform values in [−1, 1), as a function of (row, column).
Fill random_fill(uint32_t seed, int64_t rows, int64_t cols) {
  std::mt19937 rng(seed);
  auto values = std::make_shared<const std::vector<float>>(random_vec(rng, static_cast<size_t>(rows * cols)));
  return [values, cols](int64_t r, int64_t c) { return (*values)[static_cast<size_t>(r * cols + c)]; };
}

Problem random_problem(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, uint32_t seed,
                       int64_t pad_a = 1, int64_t pad_b = 3) {
  Problem p = build(ta, tb, M, N, K, random_fill(seed, M, K), random_fill(seed + 1000003u, K, N),
                    random_fill(seed + 2000003u, M, N + 2), pad_a, pad_b);
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

bool wide(ops::GemmPath path) { return path == ops::GemmPath::kWide || path == ops::GemmPath::kWide64; }

// C after gemm_on_path; A and B placed `offset` floats into their device buffers (an offset of 1
// leaves them 4-byte aligned only); `group` K chunks per block (0: gemm's choice). The wide tiles
// take bf16 only: an f32 problem runs them as large (WideTilesRefuseF32 checks the refusal).
std::vector<float> run_on(ops::GemmPath path, const Problem& p, int64_t offset = 0, int64_t group = 0) {
  if (wide(path) && p.precision == ops::GemmPrecision::kF32) path = ops::GemmPath::kLarge;
  std::vector<float> A(static_cast<size_t>(offset), 0.0f), B(static_cast<size_t>(offset), 0.0f);
  A.insert(A.end(), p.A.begin(), p.A.end());
  B.insert(B.end(), p.B.begin(), p.B.end());
  const cuda::DeviceBuffer dA = to_device(A), dB = to_device(B), dC = to_device(p.C0);
  const size_t pf = ops::gemm_partial_floats(p.M, p.N, p.K);
  const cuda::DeviceBuffer partial = poisoned(std::max<size_t>(pf, 1));
  const Status s = ops::gemm_on_path(path, p.ta, p.tb, p.M, p.N, p.K, p.alpha, dA.as<const float>() + offset, p.lda,
                                     dB.as<const float>() + offset, p.ldb, p.beta, dC.as<float>(), p.ldc,
                                     partial.as<float>(), pf, nullptr, group, p.precision);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return to_host<float>(dC, p.C0.size());
}

int64_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return d;
}

// x rounded to bf16, written independently of the kernels: to 8 significant bits, nearest with
// ties to even (nearbyint in the default rounding mode); the codec's values stay far from
// bf16's range limits.
float bf16_reference(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  int e;
  std::frexp(static_cast<double>(x), &e);  // |x| in [2^(e-1), 2^e)
  const double step = std::ldexp(1.0, e - 8);
  return static_cast<float>(std::nearbyint(static_cast<double>(x) / step) * step);
}

// The accuracy bound, per element: |c − exact| <= (8·K + 96)·2^-24·(|alpha|·Σ|a·b| + |beta·c0|),
// where exact is the product of the operands as the precision reads them (bf16: each rounded to
// bf16, so every product is exact in f32 and the bound is about the accumulation alone).
// 3xTF32 meets it: the split leaves about 3·2^-22 of each |a·b| (the dropped lo·lo and lo's own
// rounding), and each of the 3·ceil(K/8) mma of an element's chain rounds its accumulator and
// terms to f32 width, under 10·2^-23 of the magnitudes summed so far. A single TF32 product
// (1xTF32) errs by up to 2^-11 of |a·b|: on random signs that averages out below this bound at
// large K, so AccuracyIsF32Level also multiplies values whose TF32 rounding errors all point the
// same way, where 1xTF32 — or a split missing a_lo·b_hi or a_hi·b_lo — exceeds it several times.
// Returns the number of elements over the bound among those sampled (every `stride`-th), and
// checks that C's columns past N are untouched.
int64_t over_bound(const Problem& p, const std::vector<float>& C, int64_t stride = 1) {
  int64_t over = 0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t c = 0; c < p.ldc; ++c) {
      const size_t at = static_cast<size_t>(m * p.ldc + c);
      if (c >= p.N) {
        over += std::memcmp(&C[at], &p.C0[at], sizeof(float)) != 0;
        continue;
      }
      if ((m * p.N + c) % stride != 0) continue;
      double exact = 0, mag = 0;
      const bool bf16 = p.precision == ops::GemmPrecision::kBf16;
      for (int64_t k = 0; k < p.K; ++k) {
        const float a = p.a(m, k), b = p.b(k, c);
        const double t = bf16 ? static_cast<double>(bf16_reference(a)) * bf16_reference(b) : static_cast<double>(a) * b;
        exact += t;
        mag += std::fabs(t);
      }
      const double c0 = p.C0[at];
      exact = p.alpha * exact + p.beta * c0;
      mag = std::fabs(p.alpha) * mag + std::fabs(p.beta * c0);
      const double bound = (8.0 * static_cast<double>(p.K) + 96.0) * std::ldexp(1.0, -24) * mag + 1e-37;
      const double e = std::fabs(static_cast<double>(C[at]) - exact);
      over += !(e <= bound);
    }
  return over;
}

constexpr ops::GemmPath kPaths[] = {ops::GemmPath::kLarge,  ops::GemmPath::kSmall, ops::GemmPath::kThin8,
                                    ops::GemmPath::kThin16, ops::GemmPath::kThin32, ops::GemmPath::kWide,
                                    ops::GemmPath::kWide64, ops::GemmPath::kAuto};

const char* path_name(ops::GemmPath p) {
  switch (p) {
    case ops::GemmPath::kLarge:
      return "large";
    case ops::GemmPath::kSmall:
      return "small";
    case ops::GemmPath::kThin:
      return "thin";
    case ops::GemmPath::kThin8:
      return "thin8";
    case ops::GemmPath::kThin16:
      return "thin16";
    case ops::GemmPath::kThin32:
      return "thin32";
    case ops::GemmPath::kWide:
      return "wide";
    case ops::GemmPath::kWide64:
      return "wide64";
    default:
      return "auto";
  }
}

// Every path on the same inputs: the same bits, within the bound, columns past N untouched; over
// several K chunks also with the chunks spread one and two per block (their sums through the
// scratch and the reduce) and all in one block.
void expect_paths_agree(const Problem& p, int64_t stride = 1) {
  SCOPED_TRACE(p.name());
  const std::vector<float> ref = run_on(ops::GemmPath::kLarge, p, 0, 1 << 30);
  EXPECT_EQ(over_bound(p, ref, stride), 0);
  for (ops::GemmPath path : kPaths) {
    if (path != ops::GemmPath::kLarge) {
      EXPECT_EQ(differing(run_on(path, p), ref), 0) << path_name(path) << " differs from large";
    }
    if (ops::gemm_chunks(p.K) > 1)
      for (int64_t group : {1, 2, 1 << 30}) {
        EXPECT_EQ(differing(run_on(path, p, 0, group), ref), 0)
            << path_name(path) << ", " << group << " chunks per block, differs from large";
      }
  }
}

// Every test runs in both precisions (the fixture's parameter).
class GpuCodecGemm : public ::testing::TestWithParam<ops::GemmPrecision> {
 protected:
  Problem in_precision(Problem p) const {
    p.precision = GetParam();
    return p;
  }
  bool bf16() const { return GetParam() == ops::GemmPrecision::kBf16; }
};

INSTANTIATE_TEST_SUITE_P(Precisions, GpuCodecGemm,
                         ::testing::Values(ops::GemmPrecision::kF32, ops::GemmPrecision::kBf16),
                         [](const ::testing::TestParamInfo<ops::GemmPrecision>& i) {
                           return std::string(i.param == ops::GemmPrecision::kBf16 ? "bf16" : "f32");
                         });

TEST_P(GpuCodecGemm, EveryPathGivesTheSameBits) {
  REQUIRE_GPU();
  struct Shape {
    int64_t M, N, K;
  };
  // Ragged against every tile (thin 16 × 8/16/32, small 64 × 64, large 128 × 64, wide 64 or
  // 128 × 128) in M and N; K
  // within a chunk (256), ragged against the stage depth (32) and the k-step (8), on a chunk
  // boundary, over several chunks.
  const Shape shapes[] = {{1, 1, 1},      {300, 1, 2500},  {64, 4, 37},    {129, 8, 1024}, {33, 9, 1025},
                          {17, 16, 40},   {300, 17, 130},  {96, 33, 3000}, {1, 65, 77},    {16, 300, 2049},
                          {70, 100, 129}, {129, 129, 511}, {257, 200, 1100}};
  int cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (float beta : {0.0f, 0.5f}) {
        const Problem p = in_precision(random_problem(layout & 1, layout & 2, s.M, s.N, s.K,
                                                      cases % 3 == 1 ? 0.75f : 1.0f, beta,
                                                      static_cast<uint32_t>(500 + cases)));
        expect_paths_agree(p, s.M * s.N > 20000 ? 7 : 1);
        ++cases;
      }
  EXPECT_EQ(cases, 104);
}

// The codec's products at real size, for one stream (N or M of 1–2) and for a batch: convolutions
// (A [cout, cin·7], B the im2col columns), a transposed conv (A stored transposed), the transformer
// (B a weight stored [N, K]; its input projection both transposed), the output projection, and a
// late vocoder conv. Leading dimensions as the decoder passes them (unpadded).
TEST_P(GpuCodecGemm, EveryPathGivesTheSameBitsOnCodecShapes) {
  REQUIRE_GPU();
  for (auto [ta, tb, M, N, K] : {std::tuple<bool, bool, int64_t, int64_t, int64_t>{false, false, 1024, 1, 7168},
                                 {false, false, 1024, 122, 7168},
                                 {true, false, 4096, 2, 1024},
                                 {true, false, 4096, 244, 1024},
                                 {false, true, 1, 3072, 512},
                                 {false, true, 122, 3072, 512},
                                 {false, true, 1, 512, 1024},
                                 {true, true, 1, 512, 1024},
                                 {true, true, 128, 512, 1024},
                                 {false, true, 1024, 1, 512},
                                 {false, false, 96, 1920, 672},
                                 {false, false, 768, 1024, 5376},
                                 {true, false, 12288, 256, 1536},
                                 {false, true, 512, 4096, 1024},
                                 {false, false, 1, 1920, 448}}) {
    const Problem p = in_precision(random_problem(ta, tb, M, N, K, 1.0f, 0.0f, static_cast<uint32_t>(M * 7 + N), 0, 0));
    expect_paths_agree(p, 97);
  }
}

// 16-byte staging (aligned A and B, leading dimensions multiples of 4) and 4-byte staging (the same
// values one float into their buffers) give the same bits on every path.
TEST_P(GpuCodecGemm, AlignedAndUnalignedOperandsGiveTheSameBits) {
  REQUIRE_GPU();
  int cases = 0;
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{200, 136, 1100}, {20, 8, 72}, {64, 36, 2052}})
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const int64_t wa = ta ? M : K, wb = tb ? K : N;
      const Problem p = in_precision(random_problem(ta, tb, M, N, K, 1.0f, 0.25f, static_cast<uint32_t>(40 + cases),
                                                    (4 - wa % 4) % 4, (4 - wb % 4) % 4));
      SCOPED_TRACE(p.name());
      for (ops::GemmPath path : kPaths) {
        const std::vector<float> aligned = run_on(path, p), unaligned = run_on(path, p, 1);
        EXPECT_EQ(differing(aligned, unaligned), 0) << path_name(path);
        EXPECT_EQ(over_bound(p, aligned, 5), 0) << path_name(path);
      }
      ++cases;
    }
}

// The batch invariance: row r of C computed among 300 rows equals row r computed alone (M = 1, so
// gemm takes another tile) and computed at another position (the rows rotated), on every path.
TEST_P(GpuCodecGemm, ARowGivesTheSameBitsAloneAndAtAnyPosition) {
  REQUIRE_GPU();
  const int64_t M = 300, K = 2500;
  int cases = 0;
  for (int64_t N : {1, 5, 40, 300})
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const uint32_t seed = static_cast<uint32_t>(70 + cases);
      const Fill a = random_fill(seed, M, K), b = random_fill(seed + 1, K, N), c0 = random_fill(seed + 2, M, N + 2);
      Problem all = in_precision(build(ta, tb, M, N, K, a, b, c0));
      all.beta = 0.5f;
      SCOPED_TRACE(all.name());
      const std::vector<float> full = run_on(ops::GemmPath::kAuto, all);
      EXPECT_EQ(over_bound(all, full, 13), 0);
      const int64_t shift = 37;
      Problem rotated = in_precision(build(
          ta, tb, M, N, K, [&](int64_t m, int64_t k) { return a((m + M - shift) % M, k); }, b,
          [&](int64_t m, int64_t c) { return c0((m + M - shift) % M, c); }));
      rotated.beta = all.beta;
      for (ops::GemmPath path : kPaths) {
        const std::vector<float> moved = run_on(path, rotated);
        int64_t wrong = 0;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n)
            wrong += std::memcmp(&moved[static_cast<size_t>(((m + shift) % M) * rotated.ldc + n)],
                                 &full[static_cast<size_t>(m * all.ldc + n)], sizeof(float)) != 0;
        EXPECT_EQ(wrong, 0) << "rotated rows, " << path_name(path);
      }
      for (int64_t r : {0, 17, 150, 299}) {
        Problem one = in_precision(build(
            ta, tb, 1, N, K, [&](int64_t, int64_t k) { return a(r, k); }, b,
            [&](int64_t, int64_t c) { return c0(r, c); }));
        one.beta = all.beta;
        for (ops::GemmPath path : kPaths) {
          const std::vector<float> alone = run_on(path, one);
          EXPECT_EQ(std::memcmp(alone.data(), &full[static_cast<size_t>(r * all.ldc)], N * sizeof(float)), 0)
              << "row " << r << " alone, " << path_name(path);
        }
      }
      ++cases;
    }
  EXPECT_EQ(cases, 16);
}

// A stream's columns: C's columns [c0, c0 + w) computed among 300 equal those columns computed
// alone (only they in B), on every path.
TEST_P(GpuCodecGemm, AStreamsColumnsGiveTheSameBitsAlone) {
  REQUIRE_GPU();
  const int64_t N = 300, K = 2100;
  for (int64_t M : {1, 40, 200})
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const uint32_t seed = static_cast<uint32_t>(900 + M + layout);
      const Fill a = random_fill(seed, M, K), b = random_fill(seed + 1, K, N), c0 = random_fill(seed + 2, M, N + 2);
      const Problem all = in_precision(build(ta, tb, M, N, K, a, b, c0));
      SCOPED_TRACE(all.name());
      const std::vector<float> full = run_on(ops::GemmPath::kAuto, all);
      for (auto [first, w] : {std::pair<int64_t, int64_t>{0, 1}, {17, 40}, {250, 50}, {129, 1}, {100, 8}}) {
        const Problem part = in_precision(build(
            ta, tb, M, w, K, a, [&](int64_t k, int64_t n) { return b(k, first + n); },
            [&](int64_t m, int64_t c) { return c0(m, first + c); }));
        for (ops::GemmPath path : kPaths) {
          const std::vector<float> alone = run_on(path, part);
          int64_t wrong = 0;
          for (int64_t m = 0; m < M; ++m)
            wrong += std::memcmp(&alone[static_cast<size_t>(m * part.ldc)],
                                 &full[static_cast<size_t>(m * all.ldc + first)], w * sizeof(float)) != 0;
          EXPECT_EQ(wrong, 0) << "columns " << first << " + " << w << ", " << path_name(path);
        }
      }
    }
}

// Accuracy (over_bound's bound) on random data and on values whose TF32 rounding errors add up:
// a = 1 + 7·2^-14 and b = 1 + 5·2^-14 both round to 1 in TF32 and in bf16. f32: at K = 200 a
// single-TF32 chain is off by 200·12·2^-14 ≈ 0.15 where the bound allows 1696·2^-24·200 ≈ 0.02 (a
// split missing a_lo·b_hi: 0.085; missing a_hi·b_lo: 0.061). bf16: C is exactly ±K. With signs
// alternating by row and column. Then values between bf16 neighbours (1 + 2^-8 + 2^-10 rounds up,
// 1 + 2^-8 down to 1, 1 + 3·2^-8 up to 1 + 2^-6 by ties to even), which a truncating conversion
// or f32 operands get wrong by far more than the bound.
TEST_P(GpuCodecGemm, AccuracyMatchesThePrecision) {
  REQUIRE_GPU();
  const float a1 = 1.0f + 7.0f * std::ldexp(1.0f, -14), b1 = 1.0f + 5.0f * std::ldexp(1.0f, -14);
  for (int64_t K : {8, 200, 1100}) {
    const Problem p = in_precision(build(
        false, false, 40, 24, K, [&](int64_t m, int64_t) { return m % 2 ? -a1 : a1; },
        [&](int64_t, int64_t n) { return n % 3 ? b1 : -b1; }, [](int64_t, int64_t) { return 0.0f; }));
    SCOPED_TRACE(p.name());
    for (ops::GemmPath path : kPaths) {
      const std::vector<float> C = run_on(path, p);
      EXPECT_EQ(over_bound(p, C), 0) << path_name(path);
      // Not vacuous: f32 gives the product, not K times the TF32 roundings (1), which is 7.3e-4 off;
      // bf16 gives exactly those roundings' product.
      if (bf16()) {
        EXPECT_EQ(std::fabs(C[0]), static_cast<float>(K)) << path_name(path);
      } else {
        const double exact = static_cast<double>(K) * a1 * b1;
        EXPECT_LT(std::fabs(std::fabs(static_cast<double>(C[0])) - exact), 2e-4 * exact) << path_name(path);
      }
    }
  }
  const float between[] = {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -10), 1.0f + std::ldexp(1.0f, -8),
                           1.0f + 3.0f * std::ldexp(1.0f, -8), -1.0f - std::ldexp(1.0f, -8) - std::ldexp(1.0f, -10)};
  for (int64_t K : {16, 300}) {
    const Problem p = in_precision(build(
        false, true, 20, 12, K, [&](int64_t m, int64_t k) { return between[(m + k) % 4]; },
        [&](int64_t k, int64_t n) { return between[(k * 3 + n) % 4] * 0.5f; }, [](int64_t, int64_t) { return 0.0f; }));
    SCOPED_TRACE(p.name());
    for (ops::GemmPath path : kPaths) EXPECT_EQ(over_bound(p, run_on(path, p)), 0) << path_name(path);
  }
  for (int64_t K : {1, 9, 333, 4000}) {
    const Problem p = in_precision(random_problem(true, false, 70, 50, K, -1.5f, 0.5f, static_cast<uint32_t>(K)));
    SCOPED_TRACE(p.name());
    for (ops::GemmPath path : kPaths) EXPECT_EQ(over_bound(p, run_on(path, p)), 0) << path_name(path);
  }
}

// K = 0: one empty chunk, so C = alpha·0 + beta·C0 on every path.
TEST_P(GpuCodecGemm, KZeroGivesTheEpilogueOfAZeroSum) {
  REQUIRE_GPU();
  for (float beta : {0.0f, 0.5f}) {
    Problem p = in_precision(random_problem(false, true, 40, 70, 0, 2.0f, beta, 3));
    for (ops::GemmPath path : kPaths) {
      const std::vector<float> C = run_on(path, p);
      int64_t wrong = 0;
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t c = 0; c < p.ldc; ++c) {
          const float want = c < p.N ? (beta != 0.0f ? 0.0f + beta * p.c0(m, c) : 0.0f) : p.c0(m, c);
          const float got = C[static_cast<size_t>(m * p.ldc + c)];
          wrong += std::memcmp(&got, &want, sizeof(float)) != 0;
        }
      EXPECT_EQ(wrong, 0) << "beta " << beta << ", " << path_name(path);
    }
  }
}

TEST_P(GpuCodecGemm, RefusesATooSmallSplitScratch) {
  REQUIRE_GPU();
  const Problem p = in_precision(random_problem(false, false, 8, 8, 2000, 1.0f, 0.0f, 2));
  const cuda::DeviceBuffer A = to_device(p.A), B = to_device(p.B), C = to_device(p.C0);
  const size_t pf = ops::gemm_partial_floats(p.M, p.N, p.K);
  const int64_t chunks = (2000 + ops::kGemmKChunk - 1) / ops::kGemmKChunk;
  ASSERT_EQ(pf, static_cast<size_t>(chunks * 8 * 8));
  const cuda::DeviceBuffer partial = poisoned(pf);
  const Status s = ops::gemm_on_path(ops::GemmPath::kAuto, false, false, p.M, p.N, p.K, 1.0f, A.as<const float>(),
                                     p.lda, B.as<const float>(), p.ldb, 0.0f, C.as<float>(), p.ldc, partial.as<float>(),
                                     pf - 1, nullptr, 1, p.precision);
  EXPECT_FALSE(s.ok());
}

// gemm_bf16_operands on operands rounded to bf16 here (core/dtype.h's f32_to_bf16, written apart
// from the kernels) gives the bits of gemm on the f32 operands in bf16 precision, on both wide
// tiles and gemm's choice, with K's chunks one, two or all per block; ragged M and edges of N and
// K at multiples of 8, and the vocoder's shapes; sizes it cannot take are refused.
TEST(GpuCodecGemmWide, Bf16OperandsGiveTheBitsOfRoundingInTheGemm) {
  REQUIRE_GPU();
  int cases = 0;
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{130, 136, 1032}, {1, 8, 8}, {64, 128, 256},
                         {200, 520, 2056}, {96, 7680, 672}, {768, 1024, 5376}, {192, 2560, 1344}}) {
    Problem p = random_problem(false, false, M, N, K, cases % 2 ? 0.75f : 1.0f, cases % 3 ? 0.0f : 0.5f,
                               static_cast<uint32_t>(900 + cases), 0, 0);
    p.precision = ops::GemmPrecision::kBf16;
    SCOPED_TRACE(p.name());
    const std::vector<float> want = run_on(ops::GemmPath::kWide, p);
    std::vector<uint16_t> a16(p.A.size()), b16(p.B.size());
    for (size_t i = 0; i < a16.size(); ++i) a16[i] = f32_to_bf16(p.A[i]);
    for (size_t i = 0; i < b16.size(); ++i) b16[i] = f32_to_bf16(p.B[i]);
    const cuda::DeviceBuffer dA = to_device(a16), dB = to_device(b16);
    const size_t pf = ops::gemm_partial_floats(M, N, K);
    const cuda::DeviceBuffer partial = poisoned(std::max<size_t>(pf, 1));
    for (ops::GemmPath path : {ops::GemmPath::kAuto, ops::GemmPath::kWide, ops::GemmPath::kWide64})
      for (int64_t group : {int64_t{0}, int64_t{1}, int64_t{2}}) {
        const cuda::DeviceBuffer dC = to_device(p.C0);
        const Status st = ops::gemm_bf16_operands(path, M, N, K, p.alpha, dA.as<const uint16_t>(), p.lda,
                                                  dB.as<const uint16_t>(), p.ldb, p.beta, dC.as<float>(), p.ldc,
                                                  partial.as<float>(), pf, nullptr, group);
        ASSERT_TRUE(st.ok()) << st.error().to_string();
        EXPECT_EQ(differing(to_host<float>(dC, p.C0.size()), want), 0) << path_name(path) << ", group " << group;
      }
    EXPECT_EQ(over_bound(p, want, 13), 0);
    ++cases;
  }
  EXPECT_EQ(cases, 7);
  // K or N off a multiple of 8, or a misaligned operand: refused, C untouched.
  const Problem p = random_problem(false, false, 16, 12, 40, 1.0f, 0.0f, 3, 0, 0);
  std::vector<uint16_t> a16(p.A.size() + 8), b16(p.B.size() + 8);
  const cuda::DeviceBuffer dA = to_device(a16), dB = to_device(b16), dC = to_device(p.C0);
  const size_t pf = ops::gemm_partial_floats(16, 16, 40);
  const cuda::DeviceBuffer partial = poisoned(std::max<size_t>(pf, 1));
  for (auto [N, K, shift] : {std::tuple<int64_t, int64_t, int>{12, 40, 0}, {16, 36, 0}, {16, 40, 1}}) {
    const Status st = ops::gemm_bf16_operands(ops::GemmPath::kAuto, 16, N, K, 1.0f, dA.as<const uint16_t>() + shift, K,
                                              dB.as<const uint16_t>(), N, 0.0f, dC.as<float>(), p.ldc,
                                              partial.as<float>(), pf, nullptr);
    ASSERT_FALSE(st.ok()) << "N=" << N << " K=" << K << " shift=" << shift;
    EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(differing(to_host<float>(dC, p.C0.size()), p.C0), 0);
}

TEST(GpuCodecGemmWide, WideTilesRefuseF32) {
  REQUIRE_GPU();
  const Problem p = random_problem(false, false, 130, 140, 300, 1.0f, 0.0f, 9);
  const cuda::DeviceBuffer A = to_device(p.A), B = to_device(p.B), C = to_device(p.C0);
  const size_t pf = ops::gemm_partial_floats(p.M, p.N, p.K);
  const cuda::DeviceBuffer partial = poisoned(pf);
  for (ops::GemmPath path : {ops::GemmPath::kWide, ops::GemmPath::kWide64}) {
    const Status s = ops::gemm_on_path(path, false, false, p.M, p.N, p.K, 1.0f, A.as<const float>(), p.lda,
                                       B.as<const float>(), p.ldb, 0.0f, C.as<float>(), p.ldc, partial.as<float>(), pf,
                                       nullptr, 0, ops::GemmPrecision::kF32);
    ASSERT_FALSE(s.ok()) << path_name(path);
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace chorus::gpu_test
