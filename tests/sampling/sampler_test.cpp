// The sampler against hand-computed expectations and a naive double-precision reference of the
// distribution it must draw from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "sampling/sampler.h"

namespace chorus::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SamplerRules, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOnce) {
  std::vector<float> l = {2.0f, -1.0f, 3.0f, 0.5f};
  const int32_t hist[] = {0, 1, 0, 0};  // id 0 three times: still penalised once
  LogitRules r;
  r.penalized = hist;
  apply_rules(l, r, 2.0f);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -2.0f, 3.0f, 0.5f}));
}

TEST(SamplerRules, MasksOutsideTheAllowedRangeExceptListedIdsAndBlocksIds) {
  std::vector<float> l(8, 1.0f);
  const int32_t extra[] = {6}, blocked[] = {2};
  LogitRules r;
  r.allowed_below = 4;
  r.also_allowed = extra;
  r.blocked = blocked;
  apply_rules(l, r, 1.0f);
  EXPECT_EQ(l, (std::vector<float>{1, 1, -kInf, 1, -kInf, -kInf, 1, -kInf}));
}

TEST(SamplerChoose, GreedyTakesTheFirstLargestAndIgnoresTheDraw) {
  for (uint32_t f = 0; f < 50; ++f) {
    std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
    SamplerParams p;
    p.greedy = true;
    auto id = choose(l, p, {7, 0, f, 0, 0});
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(*id, 1);
  }
  std::vector<float> l = {0.5f, 2.0f, -1.0f};
  SamplerParams zero_t;
  zero_t.temperature = 0.0f;  // temperature 0 means greedy
  EXPECT_EQ(*choose(l, zero_t, {}), 1);
}

TEST(SamplerChoose, TopKOfOneIsGreedyWhateverTheDraw) {
  SamplerParams p;
  p.top_k = 1;
  p.temperature = 5.0f;
  for (uint32_t f = 0; f < 200; ++f) {
    std::vector<float> l = {0.1f, 0.3f, 0.2f, -0.4f};
    EXPECT_EQ(*choose(l, p, {1, 0, f, 3, 0}), 1);
  }
}

TEST(SamplerChoose, InverseCdfOverTwoEqualIdsFollowsTheUniform) {
  // Two equal logits: the CDF steps at 1/2, so the id is 1 exactly when u >= 0.5.
  SamplerParams p;
  int ones = 0;
  for (uint32_t f = 0; f < 500; ++f) {
    std::vector<float> l = {1.0f, 1.0f, -kInf};
    const DrawAddress a{99, 2, f, 7, 0};
    const int32_t want = uniform53(a) >= 0.5 ? 1 : 0;
    ones += want;
    EXPECT_EQ(*choose(l, p, a), want);
  }
  EXPECT_GT(ones, 200);  // both outcomes occur
  EXPECT_LT(ones, 300);
}

TEST(SamplerChoose, RejectsBrokenLogitsInsteadOfPickingGarbage) {
  SamplerParams p;
  std::vector<float> nan = {0.0f, std::nanf(""), 1.0f};
  EXPECT_FALSE(choose(nan, p, {}).ok());
  std::vector<float> masked = {-kInf, -kInf};
  EXPECT_FALSE(choose(masked, p, {}).ok());
  std::vector<float> posinf = {kInf, 0.0f};
  EXPECT_FALSE(choose(posinf, p, {}).ok());
}

TEST(SamplerParamsCheck, RejectsOutOfRangeValues) {
  EXPECT_TRUE(validate(SamplerParams{}, "x").ok());
  SamplerParams p;
  p.temperature = -0.1f;
  EXPECT_FALSE(validate(p, "x").ok());
  p = {};
  p.temperature = std::nanf("");
  EXPECT_FALSE(validate(p, "x").ok());
  p = {};
  p.top_p = 0.0f;
  EXPECT_FALSE(validate(p, "x").ok());
  p = {};
  p.top_p = 1.5f;
  EXPECT_FALSE(validate(p, "x").ok());
  p = {};
  p.top_k = -1;
  EXPECT_FALSE(validate(p, "x").ok());
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_FALSE(validate(p, "x").ok());
}

// Naive reference: the distribution after temperature, top-k (ties kept) and top-p, in double.
std::vector<double> reference_distribution(const std::vector<float>& logits, double temperature, int top_k, double top_p) {
  const size_t n = logits.size();
  std::vector<double> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = logits[i] / temperature;
  std::vector<double> sorted = s;
  std::sort(sorted.rbegin(), sorted.rend());
  std::vector<bool> keep(n, true);
  if (top_k > 0 && top_k < int(n))
    for (size_t i = 0; i < n; ++i) keep[i] = s[i] >= sorted[top_k - 1];
  double mx = sorted[0], z = 0;
  std::vector<double> p(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    if (keep[i]) z += p[i] = std::exp(s[i] - mx);
  for (auto& v : p) v /= z;
  if (top_p < 1.0) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    double cum = 0;
    size_t k = 0;
    while (k < n && (k == 0 || cum < top_p)) cum += p[order[k++]];
    for (size_t j = k; j < n; ++j) p[order[j]] = 0;
    double z2 = 0;
    for (double v : p) z2 += v;
    for (auto& v : p) v /= z2;
  }
  return p;
}

void expect_frequencies(const std::vector<float>& logits, SamplerParams params) {
  const auto want = reference_distribution(logits, params.temperature, params.top_k, params.top_p);
  const int n = 100000;
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    auto id = choose(l, params, {2024, 1, static_cast<uint32_t>(i), 4, 0});
    ASSERT_TRUE(id.ok());
    ++count[*id];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = want[i], sd = std::sqrt(n * p * (1 - p));
    if (p == 0) {
      EXPECT_EQ(count[i], 0) << "id " << i << " should never be drawn";
    } else {
      EXPECT_NEAR(count[i], n * p, 5 * sd + 1) << "id " << i;
    }
  }
}

TEST(SamplerChoose, DrawsFromTheTemperatureTopKTopPDistribution) {
  const std::vector<float> logits = {1.0f, 2.5f, -0.5f, 2.5f, 0.3f, 1.7f, -2.0f, 0.9f};
  SamplerParams p;
  p.temperature = 0.9f;
  expect_frequencies(logits, p);
  p.top_k = 4;
  expect_frequencies(logits, p);
  p.top_k = 0;
  p.top_p = 0.6f;
  expect_frequencies(logits, p);
  p.temperature = 1.7f;
  p.top_k = 5;
  p.top_p = 0.9f;
  expect_frequencies(logits, p);
}

TEST(SamplerTop2, ReportsTheGapBetweenTheTwoBest) {
  const std::vector<float> l = {0.5f, 2.0f, -kInf, 1.25f};
  const Top2 t = top2(l);
  EXPECT_EQ(t.id, 1);
  EXPECT_FLOAT_EQ(t.margin, 0.75f);
}

}  // namespace
}  // namespace chorus::sampling
