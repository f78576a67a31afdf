// A naive double-precision speech encoder written straight from the spec (qwen3_tts.md §4.3 and
// transformers' Mimi padding rules), independent of the CPU kernels: plain loops over the
// checkpoint's weights. It measures how far our f32 pipeline and the official f32 goldens each sit
// from exact arithmetic, and decides the reference codes with exact distances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "encoder_test_util.h"
#include "models/codec/speech_encoder.h"
#include "io/weight_table.h"
#include "speech_encoder_reference.h"

namespace chorus::test {
namespace {

TEST(SpeechEncoderReference, F32PipelineAndGoldensAgreeWithExactArithmetic) {
  const auto& f = tiny_base_files();
  const GoldenFile g = golden("speech_encoder");
  const auto wave = g.f32("wave_3s");
  const ReferenceEncoding ref = reference_encode(f, std::vector<double>(wave.begin(), wave.end()));

  std::map<std::string, std::vector<float>> ours;
  auto enc = codec::SpeechEncoder::load(f.codec, f.config.codec);
  ASSERT_TRUE(enc.ok()) << enc.error().to_string();
  enc->set_thread_pool(nullptr);
  codec::detail::StageTap tap = [&](const std::string& name, const float* d, int64_t rows, int64_t cols) {
    ours[name].assign(d, d + rows * cols);
  };
  ASSERT_TRUE(enc->encode(wave.data(), static_cast<int64_t>(wave.size()), tap).ok());

  for (const char* name : {"seanet", "transformer", "downsample"}) {
    const auto& exact = ref.stages.at(name);
    const auto gold = g.f32(name);
    ASSERT_EQ(exact.size(), gold.size()) << name;
    ASSERT_EQ(ours[name].size(), gold.size()) << name;
    double e_ours = 0, e_gold = 0, mx = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      e_ours = std::max(e_ours, std::fabs(ours[name][i] - exact[i]));
      e_gold = std::max(e_gold, std::fabs(gold[i] - exact[i]));
      mx = std::max(mx, std::fabs(exact[i]));
    }
    EXPECT_GT(mx, 0.1) << name;
    EXPECT_LT(e_ours, 1e-5 * std::max(1.0, mx)) << name;
    EXPECT_LT(e_gold, 1e-5 * std::max(1.0, mx)) << name;  // the spec reading matches the official code
    std::printf("[exact ref] %-12s ours vs f64 %.2e, official vs f64 %.2e (max |x| %.3f)\n", name, e_ours, e_gold, mx);
  }
}

// The algorithm itself (padding, downsample, split RVQ, 16 kept codebooks) decides every code as the
// official encoder does when computed exactly.
TEST(SpeechEncoderReference, ExactArithmeticGivesEveryOfficialCode) {
  const GoldenFile g = golden("speech_encoder");
  const auto wave = g.f32("wave_3s");
  for (const auto& [name, samples] : {std::pair<const char*, size_t>{"codes_3s", 72000}, {"codes_1s", 24000}}) {
    const ReferenceEncoding ref = reference_encode(tiny_base_files(), std::vector<double>(wave.begin(), wave.begin() + samples));
    const auto want = g.i32(name);
    ASSERT_EQ(ref.codes.size(), want.size()) << name;
    EXPECT_EQ(ref.codes, want) << name;
    double smallest = INFINITY;
    for (double m : ref.margins) smallest = std::min(smallest, m);
    std::printf("[exact ref] %s: exact codes equal the official %zu; smallest decision margin %.2e\n", name, want.size(), smallest);
  }
}

}  // namespace
}  // namespace chorus::test
