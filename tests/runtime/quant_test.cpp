// Weight-only quantisation (runtime/cpu/quant.h):
//   - every dequantised value lies within half a quantisation step of its weight, the step derived
//     here from the group's own range (max|w|/127 for int8, (max − min)/15 for int4);
//   - the quantised linear equals a double-precision product with those dequantised values, within
//     the sum-of-products bound of linear_test.cpp, for every ISA, thread count and batch size;
//   - planted quantiser mistakes (a scale taken from the neighbouring group, scales 11 % too large)
//     break both checks, so the checks can fail.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/quant.h"
#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

constexpr int64_t kG = QuantMatrix::kGroup;

QuantMatrix quantize_ok(const TestMatrix& w, WeightFormat f) {
  auto q = QuantMatrix::quantize(w.ref(), f);
  EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().to_string());
  return q.ok() ? std::move(*q) : QuantMatrix{};
}

// Largest |w − value| / bound over the matrix, with the bound half a step of the group's range
// (plus the f16 rounding of the scale and offset). <= 1 means every value is where a correct
// quantiser can put it. A partial last group is padded with zeros, which count in its range.
double worst_error_ratio(const TestMatrix& w, const QuantMatrix& q, WeightFormat f) {
  if (q.rows() != w.rows || q.cols() != w.cols) return INFINITY;
  double worst = 0.0;
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t g = 0; g * kG < w.cols; ++g) {
      const int64_t width = std::min(kG, w.cols - g * kG);
      double lo = width < kG ? 0.0 : INFINITY, hi = width < kG ? 0.0 : -INFINITY;
      for (int64_t j = 0; j < width; ++j) {
        lo = std::min(lo, w.at(r, g * kG + j));
        hi = std::max(hi, w.at(r, g * kG + j));
      }
      const double amax = std::max(std::fabs(lo), std::fabs(hi));
      const double bound = f == WeightFormat::kInt8
                               ? 0.5 * amax / 127.0 * (1 + 0x1p-10)
                               : 0.5 * (hi - lo) / 15.0 + 0x1p-10 * (std::fabs(lo) + (hi - lo));
      for (int64_t j = 0; j < width; ++j) {
        const double err = std::fabs(static_cast<double>(q.value(r, g * kG + j)) - w.at(r, g * kG + j));
        worst = std::max(worst, err / (bound + 1e-30));
      }
    }
  return worst;
}

class QuantValues : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(QuantValues, EveryValueIsWithinHalfAStepOfItsWeight) {
  const WeightFormat f = GetParam();
  std::mt19937 rng(21);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {5, 64}, {7, 96}, {3, 24}, {6, 100}, {64, 1024}}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      const TestMatrix w = random_matrix(dt, rows, cols, rng);
      const QuantMatrix q = quantize_ok(w, f);
      const double worst = worst_error_ratio(w, q, f);
      EXPECT_LE(worst, 1.0) << weight_format_name(f) << " " << rows << "x" << cols;
      // Random weights land anywhere in a step: an error near half a step must occur, or the
      // values are not quantised at all.
      if (rows * cols >= 1024) {
        EXPECT_GT(worst, 0.8) << "suspiciously exact";
      }
    }
  }
}

TEST_P(QuantValues, PlantedScaleMistakesBreakTheBound) {
  const WeightFormat f = GetParam();
  std::mt19937 rng(22);
  const TestMatrix w = random_matrix(DType::kBF16, 9, 256, rng);
  for (auto fault : {testing::QuantFault::kScaleOffByOneGroup, testing::QuantFault::kScaleTooLarge}) {
    testing::plant_quant_fault(fault);
    const QuantMatrix bad = quantize_ok(w, f);
    testing::plant_quant_fault(testing::QuantFault::kNone);
    EXPECT_GT(worst_error_ratio(w, bad, f), 1.0) << "fault " << static_cast<int>(fault) << " went unnoticed";
  }
  EXPECT_LE(worst_error_ratio(w, quantize_ok(w, f), f), 1.0);  // and without the fault it passes
}

TEST_P(QuantValues, PaddingRowsAndShapesAreHandled) {
  const WeightFormat f = GetParam();
  std::mt19937 rng(23);
  const TestMatrix w = random_matrix(DType::kBF16, 6, 64, rng);
  const QuantMatrix q = quantize_ok(w, f);
  EXPECT_EQ(q.rows(), 6);
  EXPECT_EQ(q.cols(), 64);
  const size_t per_weight_bits = f == WeightFormat::kInt8 ? 8 : 4;
  // 8 rows (two tiles) of codes plus 16 or 32 bits of scales per group.
  EXPECT_EQ(q.bytes(), 8 * 64 * per_weight_bits / 8 + 8 * 2 * (f == WeightFormat::kInt8 ? 2 : 4));
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantValues, ::testing::Values(WeightFormat::kInt8, WeightFormat::kInt4),
                         [](const auto& info) { return std::string(weight_format_name(info.param)); });

TEST(Quantize, RejectsWhatItCannotQuantise) {
  std::mt19937 rng(24);
  const TestMatrix ok = random_matrix(DType::kBF16, 4, 64, rng);
  EXPECT_FALSE(QuantMatrix::quantize(ok.ref(), WeightFormat::kBf16).ok());
  TestMatrix inf = random_matrix(DType::kF32, 2, 32, rng);
  inf.full[5] = INFINITY;
  EXPECT_FALSE(QuantMatrix::quantize(inf.ref(), WeightFormat::kInt4).ok());
  TestMatrix huge = random_matrix(DType::kF32, 2, 32, rng);
  huge.full[3] = 1e9f;  // a scale of 1e9/127 does not fit f16
  EXPECT_FALSE(QuantMatrix::quantize(huge.ref(), WeightFormat::kInt8).ok());
}

TEST(Quantize, FormatNamesRoundTrip) {
  for (WeightFormat f : {WeightFormat::kBf16, WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kFp8})
    EXPECT_EQ(weight_format_from_name(weight_format_name(f)), f);
  EXPECT_STREQ(weight_format_name(WeightFormat::kFp8), "fp8");
  EXPECT_FALSE(weight_format_from_name("q8_0").has_value());
}

// ---- the quantised linear -------------------------------------------------------------------

struct QCase {
  int64_t M, N, K;
};

// y for x·qᵀ + bias against the double reference over q's dequantised values. With VNNI, int4
// products take x rounded to int8 per group of 32 (step s = max|x| / 127 of the group), which
// may move each term by |w|·s/2: that much more is allowed there.
double check_qlinear(WeightFormat f, QCase c, bool with_bias, uint32_t seed) {
  const bool q8 = f == WeightFormat::kInt4 && active_isa() == Isa::kAvx512Vnni;
  std::mt19937 rng(seed);
  const auto x = random_vec(rng, static_cast<size_t>(c.M * c.K));
  const TestMatrix w = random_matrix(DType::kBF16, c.N, c.K, rng);
  const QuantMatrix q = quantize_ok(w, f);
  const auto b = random_vec(rng, static_cast<size_t>(c.N));
  const float* bias = with_bias ? b.data() : nullptr;
  std::vector<double> ref(static_cast<size_t>(c.M * c.N)), bound(ref.size());
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double s = bias ? bias[n] : 0.0, mag = bias ? std::fabs(bias[n]) : 0.0;
      double act = 0;  // the int8 rounding of x, for q8
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(x[m * c.K + k]) * q.value(n, k);
        s += p;
        mag += std::fabs(p);
        if (q8 && k % kG == 0) {
          double amax = 0;
          for (int64_t j = k; j < std::min(c.K, k + kG); ++j) amax = std::max(amax, std::fabs(double(x[m * c.K + j])));
          double wsum = 0;
          for (int64_t j = k; j < std::min(c.K, k + kG); ++j) wsum += std::fabs(double(q.value(n, j)));
          act += 0.5 * amax / 127.0 * (1 + 1e-6) * wsum;
        }
      }
      ref[m * c.N + n] = s;
      bound[m * c.N + n] = (2.0 * std::sqrt(static_cast<double>(c.K)) + 2.0) * kU * mag + act;
    }
  const std::string what = std::string("qlinear ") + weight_format_name(f) + " M=" + std::to_string(c.M) +
                           " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
  const auto y = run_thread_counts(
      [&](ThreadPool* pool) {
        std::vector<float> out(ref.size(), NAN);
        linear(x.data(), c.M, q, bias, out.data(), pool);
        return out;
      },
      what);
  return expect_close(y, ref, bound, what);
}

using QuantLinearTest = IsaTest;

TEST_P(QuantLinearTest, MatchesDoubleReferenceOverDequantisedValues) {
  const QCase cases[] = {{1, 1, 32}, {1, 5, 64}, {3, 7, 96}, {4, 4, 32}, {5, 17, 128}, {2, 9, 160},
                         {1, 203, 1024}, {7, 130, 512}, {13, 3, 64}, {2, 6, 24}, {5, 9, 100}, {1, 3, 1}};
  uint32_t seed = 31;
  double worst = 0.0;
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4})
    for (const auto& c : cases)
      for (bool with_bias : {false, true}) worst = std::max(worst, check_qlinear(f, c, with_bias, seed++));
  std::printf("qlinear: worst |err| / bound = %.3g\n", worst);
}

TEST_P(QuantLinearTest, LargeShapesAreThreadCountInvariant) {
  check_qlinear(WeightFormat::kInt8, {1, 1000, 512}, true, 41);
  check_qlinear(WeightFormat::kInt4, {3, 600, 256}, false, 42);
}

TEST_P(QuantLinearTest, RowResultDoesNotDependOnBatchSize) {
  std::mt19937 rng(43);
  const int64_t M = 7, K = 224, N = 37;
  const TestMatrix w = random_matrix(DType::kBF16, N, K, rng);
  const auto x = random_vec(rng, static_cast<size_t>(M * K));
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    const QuantMatrix q = quantize_ok(w, f);
    std::vector<float> all(static_cast<size_t>(M * N)), one(static_cast<size_t>(N));
    linear(x.data(), M, q, nullptr, all.data());
    for (int64_t m = 0; m < M; ++m) {
      linear(x.data() + m * K, 1, q, nullptr, one.data());
      EXPECT_EQ(std::memcmp(one.data(), all.data() + m * N, one.size() * sizeof(float)), 0)
          << weight_format_name(f) << " row " << m;
    }
  }
}

// The whole layer's output error against the unquantised (bf16) product, relative RMS over the
// outputs: what quantisation costs one random layer. Expected from the step sizes: a group of 32
// uniform weights in [−1, 1] spans ~1.9, so int8 steps by ~2/254 and int4 by ~1.9/15; a rounding
// error uniform over a step has RMS step/√12, against 1/√3 for the weights: ~0.39 % and ~6.3 %.
// Bounds: those plus ~25 %.
double relative_rms_output_error(WeightFormat f, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t M = 4, N = 256, K = 1024;
  const TestMatrix w = random_matrix(DType::kBF16, N, K, rng);
  const auto x = random_vec(rng, static_cast<size_t>(M * K));
  const QuantMatrix q = quantize_ok(w, f);
  std::vector<float> yq(static_cast<size_t>(M * N)), yf(yq.size());
  linear(x.data(), M, q, nullptr, yq.data());
  linear(x.data(), M, w.ref(), nullptr, yf.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < yq.size(); ++i) {
    num += (static_cast<double>(yq[i]) - yf[i]) * (static_cast<double>(yq[i]) - yf[i]);
    den += static_cast<double>(yf[i]) * yf[i];
  }
  return std::sqrt(num / den);
}

TEST_P(QuantLinearTest, OutputErrorAgainstTheFloatLayerIsBounded) {
  const double e8 = relative_rms_output_error(WeightFormat::kInt8, 51);
  const double e4 = relative_rms_output_error(WeightFormat::kInt4, 52);
  std::printf("relative RMS output error: int8 %.4f, int4 %.4f\n", e8, e4);
  constexpr double kBound8 = 0.005, kBound4 = 0.08;
  EXPECT_LT(e8, kBound8);
  EXPECT_LT(e4, kBound4);
  EXPECT_GT(e4, e8);  // int4 is coarser; equal errors would mean neither was applied
  for (auto fault : {testing::QuantFault::kScaleOffByOneGroup, testing::QuantFault::kScaleTooLarge}) {
    testing::plant_quant_fault(fault);
    const double b8 = relative_rms_output_error(WeightFormat::kInt8, 51);
    const double b4 = relative_rms_output_error(WeightFormat::kInt4, 52);
    testing::plant_quant_fault(testing::QuantFault::kNone);
    std::printf("  with planted fault %d: int8 %.4f, int4 %.4f\n", static_cast<int>(fault), b8, b4);
    EXPECT_GE(b8, kBound8) << "fault " << static_cast<int>(fault);
    EXPECT_GE(b4, kBound4) << "fault " << static_cast<int>(fault);
  }
}

// A fused group must give each output exactly what linear() gives it alone, for any mix of
// formats, thread counts and K that is not a multiple of the group.
TEST_P(QuantLinearTest, FusedProductsEqualSeparateOnes) {
  std::mt19937 rng(61);
  static ThreadPool three(3);
  for (int64_t K : {int64_t{256}, int64_t{100}}) {
    const int64_t M = 3, rows[] = {37, 64, 5, 130};
    const WeightFormat formats[] = {WeightFormat::kInt4, WeightFormat::kBf16, WeightFormat::kInt8, WeightFormat::kInt4};
    std::vector<LinearWeight> ws;
    for (int i = 0; i < 4; ++i) {
      const TestMatrix w = random_matrix(DType::kBF16, rows[i], K, rng);
      Tensor t = Tensor::zeros(DType::kBF16, {rows[i], K});
      std::memcpy(t.mutable_data(), w.half.data(), w.half.size() * sizeof(uint16_t));
      auto lw = LinearWeight::load(t, formats[i]);
      ASSERT_TRUE(lw.ok());
      EXPECT_EQ(lw->format(), formats[i]);
      ws.push_back(std::move(*lw));
    }
    const auto x = random_vec(rng, static_cast<size_t>(M * K));
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &three}) {
      std::vector<std::vector<float>> fused(4), alone(4);
      std::vector<LinearOutput> outs;
      for (int i = 0; i < 4; ++i) {
        fused[i].assign(static_cast<size_t>(M * rows[i]), NAN);
        alone[i].assign(fused[i].size(), NAN);
        outs.push_back({&ws[i], fused[i].data()});
        linear(x.data(), M, ws[i], nullptr, alone[i].data());
      }
      linear_fused(x.data(), M, outs, pool);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(std::memcmp(fused[i].data(), alone[i].data(), fused[i].size() * sizeof(float)), 0)
            << "output " << i << " K=" << K;
        EXPECT_FALSE(std::isnan(alone[i][0]));
      }
    }
  }
}

CHORUS_INSTANTIATE_ISA(QuantLinearTest);

// The int4 tile's x rows (int8 per group of 32): a table's own quantiser must give the portable
// one's codes, scales and sums bit for bit, on rows that hold exact ties (s = 1, x = k + ½: to
// even), an all-zero group, a NaN, a group too small for a scale, huge values, and random ones.
TEST(QuantizeQ8, TableQuantisersEqualThePortableOne) {
  const detail::MicroKernels* tables[] = {detail::avx512_vnni_kernels()};
  const int64_t M = 4, groups = 9, lda = groups * kG + 5, width = groups * kG;
  std::mt19937 rng(71);
  std::vector<float> x(static_cast<size_t>(M * lda), 0.0f);
  const auto noise = random_vec(rng, x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = noise[i];
  float* tie = x.data() + lda;  // row 1
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < kG; ++j) tie[g * kG + j] = static_cast<float>((g * kG + j) % 254 - 127) + 0.5f;
  for (int64_t g = 0; g < groups; ++g) tie[g * kG] = g % 2 ? 127.0f : -127.0f;  // s = 1 exactly
  float* odd = x.data() + 2 * lda;  // row 2
  std::fill(odd, odd + kG, 0.0f);
  odd[kG + 3] = NAN;
  std::fill(odd + 2 * kG, odd + 3 * kG, 1e-44f);  // amax / 127 underflows: s = 0
  for (int64_t j = 0; j < kG; ++j) odd[3 * kG + j] = (j % 2 ? 3e37f : -1e30f) * static_cast<float>(j + 1) / kG;
  const auto run = [&](auto quantize, std::vector<int8_t>& q, std::vector<float>& sc, std::vector<float>& sum) {
    q.assign(static_cast<size_t>(M * width), 99);
    sc.assign(static_cast<size_t>(M * groups), NAN);
    sum.assign(sc.size(), NAN);
    quantize(x.data(), lda, M, groups, q.data(), sc.data(), sum.data());
  };
  std::vector<int8_t> q0, q1;
  std::vector<float> s0, s1, t0, t1;
  run(detail::portable_quantize_q8, q0, s0, t0);
  // The reference is not vacuous: codes span the range, tie rows round to even (half away from
  // zero would give odd codes), the small and zero groups have s = 0.
  EXPECT_EQ(*std::max_element(q0.begin(), q0.end()), 127);
  EXPECT_EQ(*std::min_element(q0.begin(), q0.end()), -127);
  for (int64_t j = 1; j < kG; ++j) EXPECT_EQ(q0[static_cast<size_t>(width + j)] % 2, 0) << "tie " << j;
  EXPECT_EQ(s0[static_cast<size_t>(groups)], 1.0f);
  EXPECT_EQ(s0[static_cast<size_t>(2 * groups)], 0.0f);
  EXPECT_EQ(s0[static_cast<size_t>(2 * groups + 2)], 0.0f);
  EXPECT_TRUE(std::isnan(t0[static_cast<size_t>(2 * groups + 1)]));
  int tested = 0;
  for (const detail::MicroKernels* t : tables) {
    if (!t || !t->quantize_q8 || (t == detail::avx512_vnni_kernels() && !cpu_features().avx512_vnni)) continue;
    ++tested;
    run(t->quantize_q8, q1, s1, t1);
    EXPECT_EQ(q0, q1) << t->name;
    EXPECT_EQ(std::memcmp(s0.data(), s1.data(), s0.size() * sizeof(float)), 0) << t->name;
    EXPECT_EQ(std::memcmp(t0.data(), t1.data(), t0.size() * sizeof(float)), 0) << t->name;
  }
  if (tested == 0) GTEST_SKIP() << "no table of this CPU has its own quantiser";
}

}  // namespace
}  // namespace chorus::cpu::test
