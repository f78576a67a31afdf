// The host side of the GPU weight formats (runtime/cpu/row_quant.h):
//   - E4M3 decoding of all 256 codes against the format's definition written out here (sign,
//     biased exponent, mantissa; subnormals; NaN), and encoding against a brute-force nearest-code
//     search (ties to the even code, saturation at ±448);
//   - int8 in the row layout holds exactly the CPU format's weights (cpu::QuantMatrix);
//   - fp8 codes and scales follow their definition (scale = f16(max|w| / 448), code = the nearest
//     E4M3 value of w / scale), and every weight is within half an E4M3 step of its value;
//   - what cannot be quantised for the GPU is refused.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "runtime/cpu/quant.h"
#include "runtime/cpu/row_quant.h"
#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

// E4M3 by its definition: (−1)^s · 2^(e−7) · (1 + m/8) for e in 1..15 (but e = 15, m = 7: NaN),
// (−1)^s · 2^(−6) · (m/8) for e = 0.
double e4m3_reference(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// The code nearest v by exhaustive search over the finite codes of v's sign; ties go to the code
// with an even mantissa (an even code); magnitudes past 448 saturate to 448's code.
int nearest_e4m3(double v) {
  const int sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  int best = -1;
  double best_d = INFINITY;
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(a - e4m3_reference(c));
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return sign | best;
}

TEST(E4m3, DecodeOfEveryCodeMatchesTheFormatDefinition) {
  int finite = 0, nans = 0;
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(c);
    const double want = e4m3_reference(c);
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want);
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0);  // −0 keeps its sign
    ++finite;
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
}

TEST(E4m3, EncodeRoundsToTheNearestCodeTiesToEvenAndSaturates) {
  // Every finite code round-trips.
  for (int c = 0; c < 256; ++c) {
    if (std::isnan(e4m3_reference(c))) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
  // Midpoints between neighbours go to the even code; just off them, to the nearer one.
  int ties = 0;
  for (int c = 0; c < 0x7E; ++c)
    for (int sign : {0, 0x80}) {
      const double lo = e4m3_reference(c), hi = e4m3_reference(c + 1);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: at most 5 significant bits
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(f32_to_e4m3(s * mid), sign | (c % 2 == 0 ? c : c + 1)) << c;
      EXPECT_EQ(f32_to_e4m3(s * std::nextafter(mid, 0.0f)), sign | c) << c;
      EXPECT_EQ(f32_to_e4m3(s * std::nextafter(mid, INFINITY)), sign | (c + 1)) << c;
      ++ties;
    }
  EXPECT_EQ(ties, 2 * 0x7E);
  for (float v : {448.0f, 455.0f, 464.0f, 480.0f, 1e9f, INFINITY}) {
    EXPECT_EQ(f32_to_e4m3(v), 0x7E) << v;
    EXPECT_EQ(f32_to_e4m3(-v), 0xFE) << v;
  }
  EXPECT_EQ(f32_to_e4m3(std::nanf("")) & 0x7F, 0x7F);
  // Random magnitudes over every binade (and below the subnormals) against the exhaustive search.
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-14, 9);
  for (int i = 0; i < 20000; ++i) {
    const float v = (i % 2 ? -1.0f : 1.0f) * std::ldexp(mant(rng), expo(rng));
    ASSERT_EQ(f32_to_e4m3(v), nearest_e4m3(v)) << v;
  }
}

TEST(RowQuant, Int8HoldsTheCpuFormatsWeightsInTheRowLayout) {
  std::mt19937 rng(32);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 96}, {5, 48}, {9, 1024}, {1, 16}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const TestMatrix w = random_matrix(DType::kBF16, rows, cols, rng, 0.05f);
    auto cpu = QuantMatrix::quantize(w.ref(), WeightFormat::kInt8);
    auto gpu = quantize_rows(w.ref(), WeightFormat::kInt8);
    ASSERT_TRUE(cpu.ok() && gpu.ok());
    ASSERT_EQ(gpu->format, WeightFormat::kInt8);
    ASSERT_EQ(gpu->codes.size(), static_cast<size_t>(rows * cols));
    ASSERT_EQ(gpu->scales.size(), static_cast<size_t>(rows * ((cols + 31) / 32)));
    int nonzero = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        // The row layout's value, decoded here from its code and scale.
        const float d = f16_to_f32(gpu->scales[static_cast<size_t>(r * ((cols + 31) / 32) + c / 32)]);
        const float v = static_cast<float>(static_cast<int8_t>(gpu->codes[static_cast<size_t>(r * cols + c)])) * d;
        ASSERT_EQ(v, cpu->value(r, c)) << r << ", " << c;
        ASSERT_EQ(gpu->value(r, c), v);
        nonzero += v != 0.0f;
      }
    EXPECT_GT(nonzero, rows * cols / 2);  // not vacuously equal
  }
}

TEST(RowQuant, Fp8CodesAndScalesFollowTheirDefinition) {
  std::mt19937 rng(33);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6, 80}, {3, 1024}, {4, 48}}) {
    for (DType dt : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << cols << " " << dtype_name(dt));
      TestMatrix w = random_matrix(dt, rows, cols, rng, 0.1f);
      auto q = quantize_rows(w.ref(), WeightFormat::kFp8);
      ASSERT_TRUE(q.ok()) << q.error().to_string();
      const int64_t groups = (cols + 31) / 32;
      ASSERT_EQ(q->format, WeightFormat::kFp8);
      ASSERT_EQ(q->scales.size(), static_cast<size_t>(rows * groups));
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t width = std::min<int64_t>(32, cols - g * 32);
          double amax = 0;
          for (int64_t j = 0; j < width; ++j) amax = std::max(amax, std::fabs(w.at(r, g * 32 + j)));
          const uint16_t want_scale = f32_to_f16(static_cast<float>(amax / 448.0));
          ASSERT_EQ(q->scales[static_cast<size_t>(r * groups + g)], want_scale);
          const double d = f16_to_f32(want_scale);
          for (int64_t j = 0; j < width; ++j) {
            const int64_t c = g * 32 + j;
            const int code = q->codes[static_cast<size_t>(r * cols + c)];
            // w / d in f32, as the quantiser divides (the weights are f32 values).
            const float quotient = static_cast<float>(w.at(r, c)) / static_cast<float>(d);
            ASSERT_EQ(code, nearest_e4m3(quotient)) << r << ", " << c;
            const double v = e4m3_reference(code) * d;
            ASSERT_EQ(static_cast<double>(q->value(r, c)), v);
            // Half a step of E4M3 (3 mantissa bits): 2⁻⁴ of the value's binade, 2⁻¹⁰ below 2⁻⁶.
            const double a = std::fabs(w.at(r, c)) / d;
            const double half_step = a < std::ldexp(1.0, -6) ? std::ldexp(1.0, -10) : std::ldexp(1.0, std::ilogb(a) - 4);
            worst = std::max(worst, std::fabs(v - w.at(r, c)) / (half_step * d * (1 + 1e-6)));
          }
        }
      EXPECT_LE(worst, 1.0);
      EXPECT_GT(worst, 0.1);  // the weights were rounded at all
    }
  }
}

// A planted mistake must break the definition check above: the scale of each row's next group. The
// groups' magnitudes differ (×3 from one to the next), as real weights' often do.
TEST(RowQuant, AScaleFromTheNeighbouringGroupDoesNotDecodeTheWeights) {
  std::mt19937 rng(34);
  TestMatrix w = random_matrix(DType::kF32, 4, 128, rng, 0.02f);
  for (int64_t i = 0; i < 4 * 128; ++i) {
    w.full[static_cast<size_t>(i)] *= std::pow(3.0f, static_cast<float>((i % 128) / 32));
    w.values[static_cast<size_t>(i)] = w.full[static_cast<size_t>(i)];
  }
  auto q = quantize_rows(w.ref(), WeightFormat::kFp8);
  ASSERT_TRUE(q.ok());
  RowQuantMatrix bad = *q;
  for (int64_t r = 0; r < 4; ++r) {
    const auto row = bad.scales.begin() + r * 4;  // 4 groups per row
    std::rotate(row, row + 1, row + 4);
  }
  double worst_ok = 0, worst_bad = 0;
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 128; ++c) {
      worst_ok = std::max(worst_ok, std::fabs(q->value(r, c) - w.at(r, c)));
      worst_bad = std::max(worst_bad, std::fabs(bad.value(r, c) - w.at(r, c)));
    }
  EXPECT_GT(worst_bad, 10 * worst_ok);
}

TEST(RowQuant, RefusesWhatItCannotQuantise) {
  std::mt19937 rng(35);
  const TestMatrix ok = random_matrix(DType::kBF16, 4, 64, rng);
  EXPECT_EQ(quantize_rows(ok.ref(), WeightFormat::kBf16).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(quantize_rows(ok.ref(), WeightFormat::kInt4).error().code, ErrorCode::kUnsupported);
  EXPECT_NE(quantize_rows(ok.ref(), WeightFormat::kInt4).error().message.find("int4 is CPU only"), std::string::npos);
  TestMatrix nan = random_matrix(DType::kF32, 2, 32, rng);
  nan.full[7] = std::nanf("");
  TestMatrix inf = random_matrix(DType::kF32, 2, 32, rng);
  inf.full[3] = INFINITY;
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kFp8}) {
    EXPECT_EQ(quantize_rows(nan.ref(), f).error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(quantize_rows(inf.ref(), f).error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(quantize_rows(MatrixRef{DType::kF32, nullptr, 0, 0}, f).error().code, ErrorCode::kInvalidArgument);
  }
  // The CPU kernels have no fp8: the CPU quantiser says so.
  auto cpu = QuantMatrix::quantize(ok.ref(), WeightFormat::kFp8);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace chorus::cpu::test
