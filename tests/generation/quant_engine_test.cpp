// Quantised weights through the engine (LoadOptions::weights) for both families: generation runs
// and keeps the engine's guarantees — the same codes for any thread count, and the same codes for
// a stream alone or batched with others (each row's products are independent of the batch).
#include <gtest/gtest.h>

#include "engine/model.h"
#include "engine/tts_model.h"
#include "golden_cases.h"
#include "runtime/cpu/quant.h"
#include "support/test_support.h"

namespace chorus::test {
namespace {

using engine::SynthesisRequest;
using engine::WeightFormat;

using Codes = std::vector<int32_t>;

SynthesisRequest request(const std::string& family, uint64_t seed, int64_t frames) {
  SynthesisRequest r;
  if (family == "qwen3-tts") {
    r.text_ids = prompt_ids().text;
    r.speaker = "ryan";
    r.language = "english";
  } else {
    r.text_ids = {5, 17, 33, 101, 7, 9, 42, 250};
  }
  r.max_frames = r.min_frames = frames;
  r.length_cap.frames_per_token = 0;
  r.seed = seed;
  return r;
}

// Every stream's codes, all stepped together.
std::vector<Codes> generate(const engine::TtsModel& m, const std::vector<SynthesisRequest>& rs) {
  std::vector<std::unique_ptr<engine::TtsStream>> owned;
  std::vector<engine::TtsStream*> ptrs;
  for (const auto& r : rs) {
    auto s = m.create_stream(r);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    if (!s.ok()) return {};
    owned.push_back(std::move(*s));
    ptrs.push_back(owned.back().get());
  }
  std::vector<Codes> codes(rs.size());
  std::vector<engine::StepResult> out(rs.size());
  while (std::any_of(ptrs.begin(), ptrs.end(), [](auto* p) { return !p->finished(); })) {
    const Status st = m.step(ptrs, out);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) break;
    for (size_t i = 0; i < rs.size(); ++i)
      if (out[i].has_frame) codes[i].insert(codes[i].end(), out[i].codes.begin(), out[i].codes.end());
  }
  return codes;
}

engine::LoadOptions options(ThreadPool* pool, WeightFormat weights) {
  engine::LoadOptions o;
  o.pool = pool;
  o.weights = weights;
  return o;
}

TEST(QuantEngine, BothFamiliesGenerateTheSameCodesAloneBatchedAndOnAnyThreadCount) {
  const std::pair<const char*, std::string> models[] = {
      {"qwen3-tts", reference_path("qwen3_tts/models/tiny_custom_voice")},
      {"breeze-tts", reference_path("breeze_tts2/models/tiny_breeze")}};
  ThreadPool one(1), three(3);
  for (const auto& [family, dir] : models)
    for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
      SCOPED_TRACE(std::string(family) + " " + cpu::weight_format_name(f));
      auto m1 = engine::load_tts_model(dir, options(&one, f));
      auto m3 = engine::load_tts_model(dir, options(&three, f));
      auto exact = engine::load_tts_model(dir, options(&one, WeightFormat::kBf16));
      ASSERT_TRUE(m1.ok() && m3.ok() && exact.ok());
      const std::vector<SynthesisRequest> rs = {request(family, 11, 10), request(family, 12, 6)};
      const auto batched = generate(**m1, rs);
      ASSERT_EQ(batched.size(), 2u);
      EXPECT_EQ(batched[0].size(), 10u * 16);
      EXPECT_EQ(batched[0], generate(**m1, {rs[0]})[0]) << "changed when batched";
      EXPECT_EQ(batched[1], generate(**m1, {rs[1]})[0]) << "changed when batched";
      EXPECT_EQ(batched, generate(**m3, rs)) << "changed with the thread count";
      // The quantised model is a different model: not the exact one's codes throughout.
      EXPECT_NE(batched[0], generate(**exact, {rs[0]})[0]);
    }
}

TEST(QuantEngine, Bf16IsTheExactModeAndTheDefault) {
  const std::string dir = reference_path("qwen3_tts/models/tiny_custom_voice");
  auto dflt = engine::load_tts_model(dir, {});
  auto bf16 = engine::load_tts_model(dir, options(nullptr, WeightFormat::kBf16));
  ASSERT_TRUE(dflt.ok() && bf16.ok());
  const SynthesisRequest r = request("qwen3-tts", 3, 8);
  EXPECT_EQ(generate(**dflt, {r}), generate(**bf16, {r}));
  EXPECT_EQ(engine::LoadOptions{}.weights, WeightFormat::kBf16);
}

// engine::load carries the format to the generator (and says which it holds); a device without
// kernels for a format refuses it for both families before touching a device, in any build: int4
// on CUDA, fp8 on the CPU, each naming the formats that device takes.
TEST(QuantEngine, LoadCarriesTheFormatAndEachDeviceRefusesFormatsItHasNoKernelsFor) {
  const std::string dirs[] = {reference_path("qwen3_tts/models/tiny_custom_voice"),
                              reference_path("breeze_tts2/models/tiny_breeze")};
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    engine::LoadOptions o = options(nullptr, WeightFormat::kInt8);
    o.codec = false;
    auto m = engine::load(dir, o);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ((*m)->weights(), WeightFormat::kInt8);
    auto direct = engine::load_tts_model(dir, o);
    ASSERT_TRUE(direct.ok());
    const SynthesisRequest r = request(dir.find("breeze") != std::string::npos ? "breeze-tts" : "qwen3-tts", 5, 6);
    EXPECT_EQ(generate((*m)->generator(), {r}), generate(**direct, {r}));
    o = options(nullptr, WeightFormat::kInt4);
    o.device = engine::Device::cuda();
    auto g = engine::load(dir, o);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.error().code, ErrorCode::kUnsupported);
    EXPECT_NE(g.error().message.find("int4 is CPU only; on CUDA use int8 or fp8"), std::string::npos)
        << g.error().message;
    o = options(nullptr, WeightFormat::kFp8);
    auto c = engine::load(dir, o);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code, ErrorCode::kUnsupported);
    EXPECT_NE(c.error().message.find("fp8 weights are CUDA only; on the CPU use int8 or int4"), std::string::npos)
        << c.error().message;
  }
}

}  // namespace
}  // namespace chorus::test
