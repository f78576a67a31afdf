// The engine interface over Qwen3-TTS: a SynthesisRequest in every mode reproduces the official
// greedy codes, defaults come from generation_config.json, the length cap holds, text is wrapped as
// the official wrapper wraps it, and bad requests fail with errors that name the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/qwen3_tts_engine.h"
#include "golden_cases.h"
#include "models/qwen3_tts/presets.h"
#include "support/test_support.h"

namespace chorus::test {
namespace {

using engine::SynthesisRequest;

std::unique_ptr<engine::TtsModel> load(const std::string& dir) {
  auto m = engine::load_tts_model(dir, {});
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

std::string ref_model(const std::string& rel) { return reference_path("qwen3_tts/" + rel); }

std::vector<int32_t> generate(const engine::TtsModel& m, const SynthesisRequest& r, engine::TtsStream** keep = nullptr) {
  auto s = m.create_stream(r);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  if (!s.ok()) return {};
  std::vector<int32_t> codes;
  engine::TtsStream* p = s->get();
  std::vector<engine::StepResult> out(1);
  while (!p->finished()) {
    const Status st = m.step({&p, 1}, out);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) break;
    if (out[0].has_frame) codes.insert(codes.end(), out[0].codes.begin(), out[0].codes.end());
  }
  return codes;
}

TEST(Engine, EveryGoldenCaseThroughTheRequestInterface) {
  // Cases recorded with the official API's default layout also run with kModelDefault.
  const std::set<std::string> api_default = {"gen_cv_ryan_english_nonstream", "gen_vd_english_nonstream",
                                             "gen_base_xvec_stream", "gen_base_icl_stream",
                                             "gen_base_icl_shortref_stream"};
  std::map<std::string, std::unique_ptr<engine::TtsModel>> models;
  for (const auto& c : gen_cases()) {
    SCOPED_TRACE(c->id);
    auto& m = models[c->model_dir];
    if (!m) m = load(ref_model(c->model_dir));
    ASSERT_TRUE(m);
    const auto want = c->golden.i32("codes");
    EXPECT_EQ(generate(*m, golden_request(*c, false)), want);
    if (api_default.count(c->id)) {
      EXPECT_EQ(generate(*m, golden_request(*c, true)), want) << "with the model's default layout";
    }
  }
}

TEST(Engine, SamplerDefaultsComeFromGenerationConfig) {
  const std::string dir = ref_model("models/tiny_base");
  auto e = engine::Qwen3TtsEngine::load(dir, nullptr);
  ASSERT_TRUE(e.ok());
  std::ifstream f(dir + "/generation_config.json");
  const auto j = nlohmann::json::parse(f);
  const auto g = (*e)->settings(SynthesisRequest{});
  EXPECT_EQ(g.talker.greedy, !j["do_sample"].get<bool>());
  EXPECT_FLOAT_EQ(g.talker.temperature, j["temperature"].get<float>());
  EXPECT_EQ(g.talker.top_k, j["top_k"].get<int>());
  EXPECT_FLOAT_EQ(g.talker.top_p, j["top_p"].get<float>());
  EXPECT_FLOAT_EQ(g.talker.repetition_penalty, j["repetition_penalty"].get<float>());
  EXPECT_EQ(g.code_predictor.greedy, !j["subtalker_dosample"].get<bool>());
  EXPECT_FLOAT_EQ(g.code_predictor.temperature, j["subtalker_temperature"].get<float>());
  EXPECT_EQ(g.code_predictor.top_k, j["subtalker_top_k"].get<int>());
  EXPECT_FLOAT_EQ(g.code_predictor.top_p, j["subtalker_top_p"].get<float>());
  EXPECT_FLOAT_EQ(g.code_predictor.repetition_penalty, 1.0f);
  EXPECT_EQ(g.max_frames, j["max_new_tokens"].get<int64_t>() - 1);
  EXPECT_EQ(g.min_frames, 2);  // the official min_new_tokens
  SynthesisRequest r;
  r.sampler.temperature = 0.5f;
  r.depth_sampler.top_k = 7;
  r.min_frames = 0;
  const auto o = (*e)->settings(r);
  EXPECT_FLOAT_EQ(o.talker.temperature, 0.5f);
  EXPECT_EQ(o.code_predictor.top_k, 7);
  EXPECT_EQ(o.min_frames, 0);
}

TEST(Engine, LengthCapLimitsFramesByTextLength) {
  EXPECT_EQ(engine::length_cap_frames({10.0, 50}, 12), 170);
  EXPECT_EQ(engine::length_cap_frames({10.0, 50}, 0), 50);
  EXPECT_EQ(engine::length_cap_frames({0.0, 50}, 12), std::numeric_limits<int64_t>::max());
  auto m = load(ref_model("models/tiny_custom_voice"));
  ASSERT_TRUE(m);
  SynthesisRequest r = golden_request(*gen_cases()[0], true);
  r.max_frames = 0;  // the checkpoint's 8191
  r.min_frames = -1;
  auto s = m->create_stream(r);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->text_tokens(), 12);
  EXPECT_EQ((*s)->max_frames(), 170);
  r.length_cap.frames_per_token = 0;  // off
  EXPECT_EQ((*m->create_stream(r))->max_frames(), 8191);
  r.length_cap = {2.0, 3};
  r.min_frames = 1000;  // EOS never allowed: the cap alone stops it
  engine::TtsStream* p = nullptr;
  auto capped = m->create_stream(r);
  ASSERT_TRUE(capped.ok());
  p = capped->get();
  std::vector<engine::StepResult> out(1);
  int frames = 0;
  while (!p->finished()) {
    ASSERT_TRUE(m->step({&p, 1}, out).ok());
    frames += out[0].has_frame;
  }
  EXPECT_EQ(frames, 2 * 12 + 3);
  EXPECT_EQ(p->stop_reason(), engine::StopReason::kMaxFrames);
}

// A make-tiny checkpoint has a small byte-level tokenizer, so text goes through the official
// templates; the same codes must come from the hand-wrapped ids.
TEST(Engine, TextIsWrappedAsTheOfficialWrapperWrapsIt) {
  const std::string dir = scratch_dir("generation_engine_tok_model");
  ASSERT_TRUE(qwen3_tts::write_random_model(
                  dir, qwen3_tts::preset_config(qwen3_tts::Variant::kCustomVoice, qwen3_tts::Dims::kTiny), 3)
                  .ok());
  auto tok = text::Qwen2Tokenizer::load(dir);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  auto id = [&](const char* t) { return *tok->token_id(t); };
  const int32_t start = id("<|im_start|>"), end = id("<|im_end|>"), assistant = id("assistant"), user = id("user"),
                nl = id("\xC4\x8A");  // "\n" in byte-level form
  auto body = [&](const char* s) { return tok->encode(s); };
  auto m = load(dir);
  ASSERT_TRUE(m);
  SynthesisRequest by_text;
  by_text.text = "Hi there";
  by_text.instruct = "calm";
  by_text.speaker = "vivian";
  by_text.sampler.greedy = by_text.depth_sampler.greedy = true;
  by_text.max_frames = 6;
  SynthesisRequest by_ids = by_text;
  by_ids.text.clear();
  by_ids.instruct.clear();
  by_ids.text_ids = {start, assistant, nl};
  for (int32_t t : body("Hi there")) by_ids.text_ids.push_back(t);
  by_ids.text_ids.insert(by_ids.text_ids.end(), {end, nl, start, assistant, nl});
  by_ids.instruct_ids = {start, user, nl};
  for (int32_t t : body("calm")) by_ids.instruct_ids.push_back(t);
  by_ids.instruct_ids.insert(by_ids.instruct_ids.end(), {end, nl});
  const auto a = generate(*m, by_text), b = generate(*m, by_ids);
  EXPECT_EQ(a.size(), 6u * 16);
  EXPECT_EQ(a, b);
}

TEST(Engine, BadRequestsFailWithErrorsThatNameTheProblem) {
  auto cv = load(ref_model("models/tiny_custom_voice"));
  auto vd = load(ref_model("models/tiny_voice_design"));
  auto base = load(ref_model("models/tiny_base"));
  ASSERT_TRUE(cv && vd && base);
  const GenCase& cv_case = *gen_cases()[0];  // cv_ryan_english_nonstream
  const GenCase* icl_case = nullptr;
  for (const auto& c : gen_cases())
    if (c->id == "gen_base_icl_stream") icl_case = c.get();
  ASSERT_TRUE(icl_case);
  struct Bad {
    const char* what;
    engine::TtsModel* model;
    SynthesisRequest r;
    const char* message_part;
  };
  std::vector<Bad> bad;
  auto cvr = [&] { return golden_request(cv_case, true); };
  auto iclr = [&] { return golden_request(*icl_case, true); };
  SynthesisRequest r;
  r = cvr(); r.speaker.clear(); bad.push_back({"no speaker", cv.get(), r, "needs a speaker"});
  r = cvr(); r.speaker = "nobody"; bad.push_back({"unknown speaker", cv.get(), r, "unknown speaker"});
  r = cvr(); r.language = "klingon"; bad.push_back({"unknown language", cv.get(), r, "unknown language"});
  r = cvr(); r.speaker_embedding.assign(32, 0.1f); bad.push_back({"cv with embedding", cv.get(), r, "preset speaker"});
  bad.push_back({"vd with speaker", vd.get(), cvr(), "voice description"});
  r = iclr(); r.speaker_embedding.clear(); bad.push_back({"base without embedding", base.get(), r, "speaker embedding"});
  r = iclr(); r.ref_text_ids.clear(); bad.push_back({"icl without ref text", base.get(), r, "reference codes and reference text"});
  r = iclr(); r.instruct_ids = prompt_ids().instruct; bad.push_back({"base with instruct", base.get(), r, "no instruction"});
  r = iclr(); r.speaker_embedding.resize(31); bad.push_back({"embedding size", base.get(), r, "31 values"});
  r = iclr(); r.speaker_embedding[3] = std::nanf(""); bad.push_back({"nan embedding", base.get(), r, "non-finite"});
  r = iclr(); r.ref_codes[2][5] = 2048; bad.push_back({"ref code range", base.get(), r, "2048"});
  r = iclr(); r.ref_codes[1].pop_back(); bad.push_back({"ref row size", base.get(), r, "15 codes"});
  r = cvr(); r.text_ids.resize(8); bad.push_back({"text too short", cv.get(), r, "too short"});
  r = cvr(); r.text_ids[0] = 5; bad.push_back({"text unwrapped", cv.get(), r, "wrapped"});
  r = cvr(); r.text_ids[4] = 5000; bad.push_back({"text id range", cv.get(), r, "outside the vocabulary"});
  r = cvr(); r.text = "hello"; bad.push_back({"text and ids", cv.get(), r, "exactly one"});
  r = cvr(); r.text_ids.clear(); r.text = "hello"; bad.push_back({"no tokenizer", cv.get(), r, "no text tokenizer"});
  r = cvr(); r.sampler.top_p = 2.0f; bad.push_back({"top-p", cv.get(), r, "top-p"});
  r = cvr(); r.max_frames = -3; bad.push_back({"max frames", cv.get(), r, "max frames"});
  for (auto& b : bad) {
    SCOPED_TRACE(b.what);
    auto s = b.model->create_stream(b.r);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find(b.message_part), std::string::npos) << s.error().message;
  }
  // Guard: the unmodified requests are fine.
  EXPECT_TRUE(cv->create_stream(cvr()).ok());
  EXPECT_TRUE(base->create_stream(iclr()).ok());
}

TEST(Engine, ZeroPointSixBCustomVoiceRejectsAnInstruction) {
  const std::string dir = scratch_dir("generation_engine_0b6_model");
  auto c = qwen3_tts::preset_config(qwen3_tts::Variant::kCustomVoice, qwen3_tts::Dims::kTiny);
  c.size_label = "0b6";
  ASSERT_TRUE(qwen3_tts::write_random_model(dir, c, 4).ok());
  auto m = load(dir);
  ASSERT_TRUE(m);
  SynthesisRequest r = golden_request(*gen_cases()[0], true);
  EXPECT_TRUE(m->create_stream(r).ok());
  r.instruct_ids = prompt_ids().instruct;
  auto s = m->create_stream(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("does not follow instructions"), std::string::npos);
}

}  // namespace
}  // namespace chorus::test
