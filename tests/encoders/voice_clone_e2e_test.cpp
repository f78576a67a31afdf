// Voice cloning end to end from the reference waveform: the four gen_base_* golden cases of the
// official code, run with the x-vector and reference codes that our encoders compute from the test
// wave (wave_3s, or its first second for the short-reference case) instead of the stored ones. The
// greedy codes must be the official 40 frames.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "encoder_test_util.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"
#include "models/qwen3_tts/voice_encoder.h"
#include "speech_encoder_reference.h"

namespace chorus::test {
namespace {

constexpr int kFrames = 40;

struct Fixture {
  std::shared_ptr<const qwen3_tts::Model> model;
  std::optional<qwen3_tts::VoiceEncoder> voices;
  nlohmann::json manifest;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    auto m = qwen3_tts::Model::load(tiny_base_dir(), nullptr);
    if (!m.ok()) {
      ADD_FAILURE() << m.error().to_string();
      std::abort();
    }
    x.model = *m;
    auto v = qwen3_tts::VoiceEncoder::from_files(x.model->files(), nullptr);
    if (!v.ok()) {
      ADD_FAILURE() << v.error().to_string();
      std::abort();
    }
    x.voices = std::move(v).value();
    std::ifstream in(q3_path("manifest.json"));
    x.manifest = nlohmann::json::parse(in);
    return x;
  }();
  return f;
}

// The manifest's ids wrapped as the official wrapper wraps them.
std::vector<int32_t> wrapped(const nlohmann::json& ids, const char* key, bool generation_prompt) {
  const int32_t s = ids["im_start"], e = ids["im_end"], a = ids["assistant"], nl = ids["newline"];
  std::vector<int32_t> out = {s, a, nl};
  for (int32_t v : ids[key]) out.push_back(v);
  out.insert(out.end(), {e, nl});
  if (generation_prompt) out.insert(out.end(), {s, a, nl});
  return out;
}

// Greedy 40 frames of a prompt; the number of leading codes equal to `want`.
size_t generate_and_compare(const Fixture& f, const qwen3_tts::PromptInputs& p, const std::vector<int32_t>& want) {
  auto prompt = qwen3_tts::build_prompt(*f.model, p);
  EXPECT_TRUE(prompt.ok()) << prompt.error().to_string();
  if (!prompt.ok()) return 0;
  qwen3_tts::GenerationSettings gs;
  gs.talker.greedy = true;
  gs.talker.repetition_penalty = 1.05f;  // the goldens' generation_config value
  gs.code_predictor.greedy = true;
  gs.max_frames = kFrames;
  gs.min_frames = kFrames;
  auto s = qwen3_tts::Stream::create(f.model, std::move(prompt).value(), gs);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  if (!s.ok()) return 0;
  std::vector<int32_t> ours;
  qwen3_tts::Stream* one = s->get();
  std::vector<qwen3_tts::FrameOutput> out(1);
  while (!one->finished()) {
    EXPECT_TRUE(qwen3_tts::step_streams({&one, 1}, out).ok());
    if (!out[0].has_frame) return 0;
    ours.insert(ours.end(), out[0].codes.begin(), out[0].codes.end());
  }
  EXPECT_EQ(ours.size(), want.size());
  size_t same = 0;
  while (same < want.size() && same < ours.size() && ours[same] == want[same]) ++same;
  return same;
}

std::vector<std::vector<int32_t>> frames_of(const std::vector<int32_t>& codes, int64_t width) {
  std::vector<std::vector<int32_t>> out;
  for (size_t t = 0; t * width < codes.size(); ++t) out.emplace_back(codes.begin() + t * width, codes.begin() + (t + 1) * width);
  return out;
}

// Each case from the waveform: the x-vector must match the one the official wrapper used, and the
// reference codes too, up to near ties (speech_encoder_test.cpp); then the 40 greedy frames must be
// the official ones. Where our reference codes differ at a near tie, the prompt legitimately
// differs, so that case is also run with the official reference codes (and our x-vector) and must
// match there.
TEST(VoiceCloneEndToEnd, BaseCasesFromTheReferenceWaveform) {
  const Fixture& f = fixture();
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  const auto official_down = golden("speech_encoder").f32("downsample");
  ASSERT_EQ(wave.size(), 72000u);
  const auto& ids = f.manifest["prompt_token_ids"];
  int cases = 0, from_wave_identical = 0;
  for (const auto& c : f.manifest["cases"]) {
    const std::string id = c["id"];
    if (id.rfind("gen_base_", 0) != 0) continue;
    SCOPED_TRACE(id);
    ++cases;
    const GoldenFile g = golden(id);
    const auto& in = c["inputs"];
    // The short-reference case used the first second of the wave (13 reference frames).
    const int64_t n = id.find("shortref") != std::string::npos ? 24000 : 72000;
    const bool xvector_only = in["x_vector_only_mode"];
    auto voice = f.voices->encode(wave.data(), n, !xvector_only);
    ASSERT_TRUE(voice.ok()) << voice.error().to_string();
    EXPECT_GE(cosine(voice->x_vector, g.f32("ref_spk_embedding")), 1.0 - 1e-9);

    qwen3_tts::PromptInputs p;
    p.text_ids = wrapped(ids, "TEXT_A", true);
    p.language = in["language"];
    p.layout = in["non_streaming_mode"].get<bool>() ? qwen3_tts::TextLayout::kFull : qwen3_tts::TextLayout::kStreaming;
    p.speaker_embedding = voice->x_vector;
    p.xvector_only = xvector_only;
    bool codes_equal = true;
    if (!xvector_only) {
      const auto stored = g.i32("ref_codes");
      ASSERT_EQ(voice->ref_codes.size(), stored.size());
      codes_equal = voice->ref_codes == stored;
      if (!codes_equal) {  // only near ties may differ
        const std::vector<float> w(wave.begin(), wave.begin() + n);
        const ReferenceEncoding exact = reference_encode(tiny_base_files(), std::vector<double>(w.begin(), w.end()));
        const auto& xd = exact.stages.at("downsample");
        double err_off = 0;
        for (size_t i = 0; i < xd.size() && xd.size() == official_down.size(); ++i) err_off = std::max(err_off, std::fabs(official_down[i] - xd[i]));
        auto enc = codec::SpeechEncoder::load(tiny_base_files().codec, tiny_base_files().config.codec);
        ASSERT_TRUE(enc.ok());
        std::vector<float> ours_down;
        codec::detail::StageTap tap = [&](const std::string& name, const float* d, int64_t rows, int64_t cols) {
          if (name == "downsample") ours_down.assign(d, d + rows * cols);
        };
        ASSERT_TRUE(enc->encode(w.data(), n, tap).ok());
        double err_ours = 0;
        for (size_t i = 0; i < xd.size(); ++i) err_ours = std::max(err_ours, std::fabs(ours_down[i] - xd[i]));
        EXPECT_LT(err_ours, 1e-5);
        const CodeComparison cmp = compare_codes(tiny_base_files(), xd, voice->frames, voice->ref_codes, stored, err_ours, err_off);
        EXPECT_EQ(cmp.unexplained, 0) << cmp.first_unexplained;
      }
      p.ref_codes = frames_of(voice->ref_codes, 16);
      p.ref_text_ids = wrapped(ids, "REF_TEXT", false);
    }
    const auto want = g.i32("codes");
    const size_t same = generate_and_compare(f, p, want);
    if (codes_equal) {
      EXPECT_EQ(same, want.size()) << "first difference at frame " << same / 16 << " codebook " << same % 16;
    }
    from_wave_identical += same == want.size();
    std::printf("[clone e2e] %-30s from the waveform (%lld samples, %lld ref frames, ref codes %s): %zu of %d frames identical\n",
                id.c_str(), static_cast<long long>(n), static_cast<long long>(voice->frames),
                xvector_only ? "unused" : codes_equal ? "identical" : "differ at a near tie", same / 16, kFrames);
    if (!codes_equal) {
      p.ref_codes = frames_of(g.i32("ref_codes"), 16);
      const size_t same2 = generate_and_compare(f, p, want);
      EXPECT_EQ(same2, want.size()) << "with the official reference codes: first difference at frame " << same2 / 16;
      std::printf("[clone e2e] %-30s with our x-vector and the official reference codes: %zu of %d frames identical\n",
                  id.c_str(), same2 / 16, kFrames);
    }
  }
  EXPECT_EQ(cases, 4);
  EXPECT_GE(from_wave_identical, 2);  // at least the x-vector case and the 1 s ICL case
}

}  // namespace
}  // namespace chorus::test
