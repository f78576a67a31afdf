// The depth decoder's llama3-scaled RoPE frequencies: exactly the golden's (PyTorch's) for the tiny
// model, whose head_dim 12 puts pairs in all three bands, and within f32 rounding of a
// double-precision evaluation of the formula for the real head_dim 128.
#include <gtest/gtest.h>

#include <cmath>

#include "breeze_test_util.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/presets.h"
#include "models/breeze_tts/rope.h"

namespace chorus::breeze_tts {
namespace {

enum class Band { kDivided, kSmoothed, kKept };

// The formula in double, and which band each frequency falls in.
std::vector<double> reference(double theta, int64_t d, const Llama3RopeScaling& s, std::vector<Band>* bands) {
  std::vector<double> out;
  for (int64_t i = 0; i < d / 2; ++i) {
    const double nu = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const double lambda = 2 * M_PI / nu, L0 = static_cast<double>(s.original_max_positions);
    if (lambda > L0 / s.low_freq_factor) {
      out.push_back(nu / s.factor);
      bands->push_back(Band::kDivided);
    } else if (lambda < L0 / s.high_freq_factor) {
      out.push_back(nu);
      bands->push_back(Band::kKept);
    } else {
      const double sm = (L0 / lambda - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      out.push_back((1 - sm) * nu / s.factor + sm * nu);
      bands->push_back(Band::kSmoothed);
    }
  }
  return out;
}

TEST(BreezeRope, TinyDepthFrequenciesEqualTheGoldenExactly) {
  auto c = load_config(test::tiny_model_dir());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  test::Golden g("depth_decoder");
  const Tensor want = g.f32("rope_inv_freq");
  const std::vector<float> got = depth_rope_inv_freq(c->depth);
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want.f32()[i]) << i;
  std::vector<Band> bands;
  reference(c->depth.dims.rope_theta, c->depth.dims.head_dim, c->depth.rope_scaling, &bands);
  for (Band b : {Band::kDivided, Band::kSmoothed, Band::kKept})
    EXPECT_NE(std::find(bands.begin(), bands.end(), b), bands.end()) << "a band is not exercised";
}

TEST(BreezeRope, RealDepthFrequenciesMatchADoubleEvaluation) {
  const Config c = preset_config(Dims::kReal);
  std::vector<Band> bands;
  const auto want = reference(c.depth.dims.rope_theta, c.depth.dims.head_dim, c.depth.rope_scaling, &bands);
  const auto got = depth_rope_inv_freq(c.depth);
  ASSERT_EQ(got.size(), 64u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << i;  // a few f32 roundings
  // Without scaling the frequencies are the plain ones.
  Llama3RopeScaling off;
  const auto plain = llama3_inv_freq(5e5, 128, off);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_NEAR(plain[i], std::pow(5e5, -2.0 * static_cast<double>(i) / 128), 4e-7 * plain[i]);
}

}  // namespace
}  // namespace chorus::breeze_tts
