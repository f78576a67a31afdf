// The ECAPA-TDNN speaker encoder against the official extract_speaker_embedding on the tiny Base
// model (goldens/speaker_encoder.safetensors): mel, every block, MFA, pooling and the x-vector.
// The 1 s prefix is checked against the x-vector the official wrapper used for the short-reference
// ICL case (gen_base_icl_shortref_stream's ref_spk_embedding).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "encoder_test_util.h"
#include "models/qwen3_tts/speaker_encoder.h"

namespace chorus::test {
namespace {

using qwen3_tts::SpeakerEncoder;

const SpeakerEncoder& encoder() {
  static const SpeakerEncoder enc = [] {
    const auto& f = tiny_base_files();
    auto e = SpeakerEncoder::load(f.main, f.config);
    if (!e.ok()) {
      ADD_FAILURE() << e.error().to_string();
      std::abort();
    }
    e->set_thread_pool(nullptr);
    return std::move(e).value();
  }();
  return enc;
}

TEST(SpeakerEncoder, EveryStageAndTheXVectorMatchTheOfficialEncoder) {
  const GoldenFile g = golden("speaker_encoder");
  const auto wave = g.f32("wave_3s");
  ASSERT_EQ(wave.size(), 72000u);
  std::map<std::string, std::vector<float>> got;
  std::map<std::string, Shape> shapes;
  qwen3_tts::SpeakerTap tap = [&](const std::string& name, const float* d, int64_t rows, int64_t cols) {
    got[name].assign(d, d + rows * cols);
    shapes[name] = {rows, cols};
  };
  auto x = encoder().embed(wave.data(), static_cast<int64_t>(wave.size()), tap);
  ASSERT_TRUE(x.ok()) << x.error().to_string();
  // Relative tolerances: the stages grow in magnitude through the residual blocks.
  const std::pair<const char*, double> stages[] = {{"mel", 2e-5}, {"block0", 2e-5}, {"block1", 2e-5}, {"block2", 2e-5},
                                                   {"block3", 2e-5}, {"mfa", 2e-5}, {"asp", 2e-5}};
  for (const auto& [name, tol] : stages) {
    SCOPED_TRACE(name);
    const auto ref = g.f32(name);
    ASSERT_EQ(shapes[name], g.shape(name));
    ASSERT_EQ(got[name].size(), ref.size());
    const Diff d = compare(got[name].data(), ref);
    EXPECT_FALSE(d.bad);
    EXPECT_GT(d.max_ref, 0.1);  // not a vacuous comparison
    EXPECT_LT(d.max_abs, tol * std::max(1.0, d.max_ref));
    std::printf("[speaker encoder] %-7s %-10s max |err| %.2e (max |ref| %.3f)\n", name,
                shape_to_string(g.shape(name)).c_str(), d.max_abs, d.max_ref);
  }
  const auto want = g.f32("x_vector");
  ASSERT_EQ(x->size(), want.size());
  const Diff d = compare(x->data(), want);
  const double cos = cosine(*x, want);
  EXPECT_GE(cos, 0.99999);       // the bar ...
  EXPECT_GE(cos, 1.0 - 1e-9);    // ... and what f32 rounding allows (measured 1 − 3e-14)
  EXPECT_LT(d.max_abs, 2e-5 * std::max(1.0, d.max_ref));
  std::printf("[speaker encoder] x_vector max |err| %.2e (max |ref| %.3f), cosine 1 - %.2e\n", d.max_abs, d.max_ref, 1 - cos);
}

TEST(SpeakerEncoder, OneSecondPrefixMatchesTheShortReferenceCase) {
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  const auto want = golden("gen_base_icl_shortref_stream").f32("ref_spk_embedding");
  auto x = encoder().embed(wave.data(), 24000);
  ASSERT_TRUE(x.ok()) << x.error().to_string();
  ASSERT_EQ(x->size(), want.size());
  const double cos = cosine(*x, want);
  EXPECT_GE(cos, 1.0 - 1e-9);
  const Diff d = compare(x->data(), want);
  EXPECT_LT(d.max_abs, 2e-5 * std::max(1.0, d.max_ref));
  // Guard: this x-vector differs from the 3 s one, so the check is not satisfied by any embedding.
  EXPECT_LT(cosine(want, golden("speaker_encoder").f32("x_vector")), 0.999);
  std::printf("[speaker encoder] 1 s x_vector: max |err| %.2e, cosine 1 - %.2e\n", d.max_abs, 1 - cos);
}

TEST(SpeakerEncoder, ThreadsDoNotChangeTheXVector) {
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  SpeakerEncoder enc = encoder();
  ThreadPool pool(3);
  enc.set_thread_pool(&pool);
  auto a = enc.embed(wave.data(), 40000);
  auto b = encoder().embed(wave.data(), 40000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(SpeakerEncoder, ShortOrBadInputIsAnError) {
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  const int64_t min = encoder().min_samples();
  EXPECT_EQ(min, 1280);  // 5 mel frames: the widest reflect padding (dilation 4) needs 4 + 1
  EXPECT_TRUE(encoder().embed(wave.data(), min).ok());
  auto r = encoder().embed(wave.data(), min - 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(encoder().embed(wave.data(), 0).error().code, ErrorCode::kInvalidArgument);
  std::vector<float> w(wave.begin(), wave.begin() + 5000);
  w[77] = std::nanf("");
  EXPECT_EQ(encoder().embed(w.data(), 5000).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(encoder().embed(wave.data(), SpeakerEncoder::kMaxSamples + 1).error().code, ErrorCode::kResourceExhausted);
  EXPECT_FALSE(encoder().embed_mel(wave.data(), 4).ok());  // 4 frames < 5
}

TEST(SpeakerEncoder, NonBaseCheckpointsHaveNone) {
  auto f = qwen3_tts::open_model_files(q3_path("models/tiny_custom_voice"));
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  auto e = SpeakerEncoder::load(f->main, f->config);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::kUnsupported);
  // A Base config whose shapes the checkpoint does not have.
  qwen3_tts::Config c = tiny_base_files().config;
  c.speaker_encoder->channels[4] = 64;
  auto m = SpeakerEncoder::load(tiny_base_files().main, c);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kShapeMismatch);
}

}  // namespace
}  // namespace chorus::test
