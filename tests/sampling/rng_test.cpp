// Philox4x32-10 against the published known-answer vectors (Random123's kat_vectors file), and the
// properties the engine relies on: a draw depends only on its address.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "sampling/rng.h"

namespace chorus::sampling {
namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  using A4 = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformIsInRangeAndEveryAddressFieldMatters) {
  const DrawAddress base{0x1234567890abcdefull, 3, 17, 5, 0};
  const double u0 = uniform53(base);
  EXPECT_GE(u0, 0.0);
  EXPECT_LT(u0, 1.0);
  EXPECT_EQ(uniform53(base), u0);  // a pure function
  std::set<double> seen{u0};
  auto vary = [&](DrawAddress a) { seen.insert(uniform53(a)); };
  DrawAddress a = base;
  a.seed ^= 1;  // low key word
  vary(a);
  a = base;
  a.seed ^= 1ull << 40;  // high key word
  vary(a);
  a = base;
  a.stream += 1;
  vary(a);
  a = base;
  a.frame += 1;
  vary(a);
  a = base;
  a.codebook += 1;
  vary(a);
  a = base;
  a.draw += 1;
  vary(a);
  EXPECT_EQ(seen.size(), 7u);
}

TEST(Philox, UniformHasTheRightMeanAndSpread) {
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = uniform53({42, 0, static_cast<uint32_t>(i), static_cast<uint32_t>(i % 16), 0});
    sum += u;
    sum2 += u * u;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 0.002);
}

}  // namespace
}  // namespace chorus::sampling
