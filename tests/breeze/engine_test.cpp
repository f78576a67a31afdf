// The Breeze TTS 2 engine behind TtsModel: an f32 request reproduces the gen_plain golden codes
// through create_stream / step, stage times are filled, and the default activation mode is bf16.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "engine/breeze_engine.h"

namespace chorus::engine {
namespace {

const BreezeEngine& engine_under_test() {
  static const BreezeEngine* e = [] {
    auto r = BreezeEngine::load(breeze_tts::test::tiny_model_dir(), &ThreadPool::global());
    if (!r.ok()) throw std::runtime_error(r.error().to_string());
    return r->release();
  }();
  return *e;
}

SynthesisRequest plain_request(int64_t frames) {
  std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
  const auto manifest = nlohmann::json::parse(in);
  SynthesisRequest r;
  r.text_ids = manifest["prompt_token_ids"]["TEXT"].get<std::vector<int32_t>>();
  r.sampler.greedy = r.depth_sampler.greedy = true;
  r.max_frames = r.min_frames = frames;
  r.length_cap.frames_per_token = 0;
  return r;
}

std::vector<int32_t> generate(const SynthesisRequest& r, StageTimes* times) {
  const BreezeEngine& e = engine_under_test();
  auto s = e.create_stream(r);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  if (!s.ok()) return {};
  TtsStream* p = s->get();
  std::vector<StepResult> out(1);
  std::vector<int32_t> codes;
  while (!p->finished()) {
    const Status st = e.step({&p, 1}, out, times);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) break;
    if (out[0].has_frame) codes.insert(codes.end(), out[0].codes.begin(), out[0].codes.end());
  }
  return codes;
}

TEST(BreezeEngine, F32RequestReproducesGenPlainAndFillsStageTimes) {
  SynthesisRequest r = plain_request(30);
  r.activations = ActivationPrecision::kF32;
  StageTimes times;
  const std::vector<int32_t> codes = generate(r, &times);
  const std::vector<int32_t> want = breeze_tts::test::Golden("gen_plain").ids("codes");
  ASSERT_EQ(want.size(), 30u * 16u);
  EXPECT_EQ(codes, want);
  EXPECT_GT(times.prefill_s, 0.0);
  EXPECT_GT(times.backbone_s, 0.0);
  EXPECT_GT(times.depth_s, 0.0);
  EXPECT_GT(times.sampling_s, 0.0);
}

TEST(BreezeEngine, DefaultActivationsAreBf16) {
  const BreezeEngine& e = engine_under_test();
  SynthesisRequest r = plain_request(30);
  auto parts = e.prompt_parts(r);
  ASSERT_TRUE(parts.ok());
  const std::pair<ActivationPrecision, breeze_tts::Activations> cases[] = {
      {ActivationPrecision::kModelDefault, breeze_tts::Activations::kBF16},
      {ActivationPrecision::kBF16, breeze_tts::Activations::kBF16},
      {ActivationPrecision::kF32, breeze_tts::Activations::kF32}};
  for (const auto& [asked, want] : cases) {
    r.activations = asked;
    auto p = e.params(r, *parts);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->act, want);
  }
  // And the stream runs it: bf16 moves the tiny model's logits by ~0.05 of ~10 (bf16_test), enough
  // to flip a greedy choice within these 30 frames (frame 10, codebook 12), so the default run must
  // differ from the f32 run, which equals the golden.
  r.activations = ActivationPrecision::kModelDefault;
  const std::vector<int32_t> by_default = generate(r, nullptr);
  ASSERT_EQ(by_default.size(), 30u * 16u);
  EXPECT_NE(by_default, breeze_tts::test::Golden("gen_plain").ids("codes"));
}

}  // namespace
}  // namespace chorus::engine

namespace chorus::engine {
namespace {

// Breeze TTS 2 encodes the whole text first, so text in pieces is refused with a clear error.
TEST(BreezeEngine, TextInPiecesIsUnsupported) {
  SynthesisRequest r = plain_request(4);
  r.text_ids.clear();
  std::shared_ptr<TextFeed> feed;
  auto s = engine_under_test().create_text_stream(r, &feed);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(s.error().message.find("before it is complete"), std::string::npos) << s.error().message;
  EXPECT_EQ(feed, nullptr);
}

}  // namespace
}  // namespace chorus::engine
