#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "audio/resample.h"
#include "audio_test_util.h"

namespace chorus::audio {
namespace {

using testutil::sine;
using testutil::sine_at;

// Max |y[i] - analytic(i / rate)| over the samples away from both ends (the ends see the filter's
// implicit zero padding).
double max_error_vs_sine(const std::vector<float>& y, int rate, double hz, double amp, size_t margin) {
  double worst = 0;
  for (size_t i = margin; i + margin < y.size(); ++i) {
    worst = std::max(worst, std::fabs(y[i] - sine_at(amp, hz, static_cast<double>(i) / rate)));
  }
  return worst;
}

TEST(Resample, SineAt44100To24000KeepsFrequencyPhaseAndAmplitude) {
  const size_t n = 88200;  // 2 s
  const std::vector<float> x = sine(n, 44100, 1000.0, 0.5);
  auto y = resample(x.data(), n, 44100, 24000);
  ASSERT_TRUE(y.ok()) << y.error().to_string();
  ASSERT_EQ(y->size(), 48000u);
  // A wrong ratio, a delay or a gain error all show up against the analytic signal at 24 kHz.
  const double err = max_error_vs_sine(*y, 24000, 1000.0, 0.5, 200);
  EXPECT_LT(err, 1e-5);  // measured 3e-7
  // Non-vacuous: the signal really is there (RMS of a 0.5 sine is 0.354).
  double ss = 0;
  for (float v : *y) ss += v * v;
  EXPECT_NEAR(std::sqrt(ss / y->size()), 0.5 / std::sqrt(2.0), 2e-3);
}

TEST(Resample, UpsamplingMatchesAnalyticSine) {
  const std::vector<float> x = sine(16000, 16000, 440.0, 0.8);
  auto y = resample(x.data(), x.size(), 16000, 24000);
  ASSERT_TRUE(y.ok());
  ASSERT_EQ(y->size(), 24000u);
  EXPECT_LT(max_error_vs_sine(*y, 24000, 440.0, 0.8, 200), 1e-5);  // measured 5e-7
}

TEST(Resample, RemovesContentAboveTheNewNyquist) {
  // 15 kHz cannot exist at 24 kHz (Nyquist 12 kHz): the anti-alias filter must remove it rather
  // than fold it to 9 kHz.
  const std::vector<float> x = sine(44100, 44100, 15000.0, 0.5);
  auto y = resample(x.data(), x.size(), 44100, 24000);
  ASSERT_TRUE(y.ok());
  double ss = 0;
  for (size_t i = 200; i + 200 < y->size(); ++i) ss += (*y)[i] * (*y)[i];
  EXPECT_LT(std::sqrt(ss / (y->size() - 400)), 1e-5);  // measured 2e-8; folded it would be 0.35
}

TEST(Resample, OutputLengthIsRoundedRatio) {
  const std::vector<float> x(1001, 0.1f);
  for (auto [from, to] : {std::pair{44100, 24000}, {48000, 24000}, {8000, 24000}, {22050, 16000}}) {
    auto y = resample(x.data(), x.size(), from, to);
    ASSERT_TRUE(y.ok());
    EXPECT_EQ(y->size(), static_cast<size_t>(std::llround(1001.0 * to / from))) << from << "->" << to;
  }
}

TEST(Resample, EqualRatesCopy) {
  const std::vector<float> x = {0.1f, -0.2f, 0.3f};
  auto y = resample(x.data(), x.size(), 24000, 24000);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(*y, x);
}

TEST(Resample, StreamingInRandomChunksMatchesOneShot) {
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  std::vector<float> x = sine(30000, 48000, 300.0, 0.4);
  for (float& v : x) v += noise(rng);
  auto ref = resample(x.data(), x.size(), 48000, 22050);
  ASSERT_TRUE(ref.ok());

  auto rs = StreamResampler::create(48000, 22050);
  ASSERT_TRUE(rs.ok());
  std::vector<float> y;
  std::uniform_int_distribution<size_t> chunk(1, 3000);
  for (size_t off = 0; off < x.size();) {
    const size_t m = std::min(chunk(rng), x.size() - off);
    ASSERT_TRUE(rs->process(x.data() + off, m, y).ok());
    off += m;
  }
  ASSERT_TRUE(rs->flush(y).ok());
  ASSERT_GE(y.size() + 1, ref->size());
  ASSERT_LE(y.size(), ref->size() + 1);
  double worst = 0;
  for (size_t i = 0; i < std::min(y.size(), ref->size()); ++i) worst = std::max(worst, double(std::fabs(y[i] - (*ref)[i])));
  EXPECT_LT(worst, 1e-5);

  // After flush the resampler starts a fresh signal: the same input gives the same output.
  std::vector<float> again;
  ASSERT_TRUE(rs->process(x.data(), x.size(), again).ok());
  ASSERT_TRUE(rs->flush(again).ok());
  ASSERT_EQ(again.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(again[i], y[i], 1e-6) << i;
}

TEST(Resample, RejectsAbsurdRates) {
  const float x[4] = {};
  for (auto [from, to] : {std::pair{0, 24000}, {24000, 0}, {-8000, 24000}, {24000, 100000000}, {999, 24000}}) {
    auto y = resample(x, 4, from, to);
    ASSERT_FALSE(y.ok()) << from << "->" << to;
    EXPECT_EQ(y.error().code, ErrorCode::kOutOfRange);
    EXPECT_FALSE(StreamResampler::create(from, to).ok());
  }
}

TEST(Resample, EmptyInputGivesEmptyOutput) {
  auto y = resample(nullptr, 0, 44100, 24000);
  ASSERT_TRUE(y.ok());
  EXPECT_TRUE(y->empty());
}

}  // namespace
}  // namespace chorus::audio
