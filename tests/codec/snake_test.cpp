// SnakeBeta's vectorised sin² against a double-precision reference, including the arguments it
// hands to the library sin (huge, infinite, NaN), and independence from how a row is split.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {
namespace {

SnakeBeta make_snake(std::vector<float> log_alpha, std::vector<float> log_beta) {
  SnakeBeta s;
  for (float a : log_alpha) s.alpha.push_back(std::exp(a));
  for (float b : log_beta) s.inv_beta.push_back(1.0f / (std::exp(b) + 1e-9f));
  return s;
}

TEST(Snake, MatchesDoubleReference) {
  const SnakeBeta s = make_snake({-1.0f, 0.0f, 0.7f, 2.5f}, {0.3f, -0.5f, 0.0f, 1.0f});
  const int64_t n = 20000;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-60.0f, 60.0f);
  std::vector<float> x(static_cast<size_t>(4 * n));
  for (auto& v : x) v = wide(rng);
  // Special values: large arguments (library path), exact multiples of pi, non-finite.
  const float specials[] = {0.0f, -0.0f, 3.14159265f, 1e4f, -3e5f, 8000.5f, 1e30f,
                            std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = x[n + i] = specials[i];
  std::vector<float> y(x.size());
  s.apply(x.data(), n, y.data(), nullptr);

  double worst = 0;
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t t = 0; t < n; ++t) {
      const float xv = x[c * n + t];
      const float arg = xv * s.alpha[c];  // PyTorch multiplies in f32 too
      const double sn = std::sin(static_cast<double>(arg));
      const double want = static_cast<double>(xv) + static_cast<double>(s.inv_beta[c]) * sn * sn;
      const float got = y[c * n + t];
      if (!std::isfinite(want) || !std::isfinite(arg)) {
        EXPECT_TRUE(std::isnan(got) || std::isinf(got)) << xv;
        continue;
      }
      // Error budget: a few ulp of x (the final add) and of the sin² term.
      const double err = std::fabs(got - want);
      const double scale = std::fabs(xv) + std::fabs(s.inv_beta[c]);
      worst = std::max(worst, err / scale);
      ASSERT_LE(err, 4e-7 * scale) << "x " << xv << " channel " << c;
    }
  std::printf("  worst error %.3g (relative to |x| + 1/beta)\n", worst);
  EXPECT_GT(worst, 0.0);  // the comparison saw rounding, i.e. it was not comparing a copy with itself
}

TEST(Snake, RowSplitsGiveIdenticalBits) {
  const SnakeBeta s = make_snake({0.4f}, {-0.2f});
  const int64_t n = 1001;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-20.0f, 20.0f);
  std::vector<float> x(n), whole(n), parts(n);
  for (auto& v : x) v = d(rng);
  s.apply(x.data(), n, whole.data(), nullptr);
  // Elements land at different vector lanes / in the scalar tail when the row starts elsewhere.
  int64_t at = 0;
  for (int64_t len : {1, 3, 250, 7, 257, 483}) {
    s.apply(x.data() + at, len, parts.data() + at, nullptr);
    at += len;
  }
  ASSERT_EQ(at, n);
  EXPECT_EQ(std::memcmp(whole.data(), parts.data(), sizeof(float) * n), 0);
  // In place (y aliasing x) gives the same too.
  std::vector<float> in_place = x;
  s.apply(in_place.data(), n, in_place.data(), nullptr);
  EXPECT_EQ(std::memcmp(whole.data(), in_place.data(), sizeof(float) * n), 0);
}

}  // namespace
}  // namespace chorus::codec::detail
