// End-to-end generation vs every gen_* golden: the prompt built from the manifest's ids, prefill,
// 30 frames of backbone + depth decoder per branch, guidance combined at the backbone and at every
// depth step, greedy through the shared sampler (penalty 1.1 on codebook 0, EOS masked for the 30
// frames as the harness generated them). Codes must equal the golden codes, except where a recorded
// margin (backbone_margin / depth_margin) says the golden choice was a near-tie; the codes decoded
// through the checkpoint's audio_tokenizer/ must give the golden wav.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/generation.h"
#include "models/codec/codec_folder.h"

namespace chorus::breeze_tts {
namespace {

constexpr float kNearTie = 1e-4f;

struct Fixture {
  ModelFiles files;
  BreezeModel model;
  nlohmann::json manifest;
  PromptParts parts;
};

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto files = open_model_files(test::tiny_model_dir());
    if (!files.ok()) throw std::runtime_error(files.error().to_string());
    auto model = BreezeModel::load(*files);
    if (!model.ok()) throw std::runtime_error(model.error().to_string());
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    auto* fx = new Fixture{std::move(*files), std::move(*model), nlohmann::json::parse(in), {}};
    const auto& ids = fx->manifest["prompt_token_ids"];
    fx->parts.text = ids["TEXT"].get<std::vector<int32_t>>();
    fx->parts.instruct = ids["INSTR"].get<std::vector<int32_t>>();
    fx->parts.ref_text = ids["REF_TEXT"].get<std::vector<int32_t>>();
    fx->parts.ref.codes = test::Golden("prefill_clone").ids("input_values");
    fx->parts.ref.frames = static_cast<int64_t>(fx->parts.ref.codes.size()) / 16;
    return fx;
  }();
  return *f;
}

Layout layout_of(const std::string& name) {
  if (name == "plain") return Layout::kPlain;
  if (name == "clone") return Layout::kClone;
  if (name == "design") return Layout::kDesign;
  return Layout::kDirection;
}

GenerationParams params_of(const nlohmann::json& cs, const Config& c) {
  GenerationParams p = default_generation_params(c);
  p.backbone.greedy = p.depth.greedy = true;
  const std::string mode = cs["mode"];
  // The guided layout is the cond branch's (the ins-less "direction" for dual).
  p.layout = mode == "dual" ? Layout::kDirection : layout_of(cs["branches"]["cond"]["layout"]);
  if (mode == "cfg") p.guidance = Guidance::kCfg, p.cfg_scale = cs["cfg_scale"].get<float>();
  if (mode == "dual") {
    p.guidance = Guidance::kDual;
    p.ref_scale = cs["dual_cfg_scales"][0].get<float>();
    p.ins_scale = cs["dual_cfg_scales"][1].get<float>();
  }
  p.max_frames = p.min_frames = cs["frames"].get<int64_t>();
  return p;
}

constexpr double kWavTol = 1e-4;

// Generates one case and compares every code; stops at the first divergence (counted in one of the
// two). When every frame matched, the codes decoded through audio_tokenizer/ must give the golden wav.
void run_case(const nlohmann::json& cs, int* mismatches, int* near_ties, double* worst_wav) {
  const auto& f = fixture();
  const std::string id = cs["id"];
  test::Golden g("gen_" + id);
  const std::vector<int32_t> want = g.ids("codes");
  const Tensor bm = g.f32("backbone_margin"), dm = g.f32("depth_margin");
  const int64_t F = cs["frames"].get<int64_t>();
  ASSERT_EQ(static_cast<int64_t>(want.size()), F * 16);
  auto gen = BreezeGeneration::start(f.model, f.parts, params_of(cs, f.files.config));
  ASSERT_TRUE(gen.ok()) << gen.error().to_string();
  std::vector<int32_t> frame(16), all;
  for (int64_t t = 0; t < F; ++t) {
    auto more = gen->step(frame, &ThreadPool::global());
    ASSERT_TRUE(more.ok()) << more.error().to_string();
    ASSERT_TRUE(*more) << "stopped at frame " << t;
    for (int64_t k = 0; k < 16; ++k) {
      if (frame[static_cast<size_t>(k)] == want[static_cast<size_t>(t * 16 + k)]) continue;
      const float margin = k == 0 ? bm.f32()[t] : dm.f32()[t * 15 + k - 1];
      if (margin < kNearTie) {
        ++*near_ties;  // later frames follow a different history: stop comparing this case
        std::printf("[ %s ] near-tie divergence at frame %lld codebook %lld (margin %.3g)\n", id.c_str(),
                    static_cast<long long>(t), static_cast<long long>(k), margin);
        return;
      }
      ++*mismatches;
      ADD_FAILURE() << id << ": frame " << t << " codebook " << k << ": " << frame[static_cast<size_t>(k)]
                    << " != golden " << want[static_cast<size_t>(t * 16 + k)] << " (margin " << margin << ")";
      return;
    }
    all.insert(all.end(), frame.begin(), frame.end());
  }
  EXPECT_TRUE(gen->finished());
  EXPECT_FALSE(gen->ended_by_eos());
  static const auto codec = codec::load_codec(test::tiny_model_dir());
  ASSERT_TRUE(codec.ok()) << codec.error().to_string();
  auto wav = codec->decoder.decode_all(all.data(), F);
  ASSERT_TRUE(wav.ok()) << wav.error().to_string();
  const Tensor want_wav = g.f32("wav");
  ASSERT_EQ(static_cast<int64_t>(wav->size()), want_wav.numel());
  const double e = test::max_abs_diff(wav->data(), want_wav.f32(), want_wav.numel());
  EXPECT_LE(e, kWavTol);
  *worst_wav = std::max(*worst_wav, e);
}

TEST(BreezeGeneration, EveryGoldenCaseEndToEnd) {
  const auto& f = fixture();
  int cases = 0, mismatches = 0, near_ties = 0;
  double worst_wav = 0;
  for (const auto& cs : f.manifest["cases"]) {
    SCOPED_TRACE(cs["id"].get<std::string>());
    run_case(cs, &mismatches, &near_ties, &worst_wav);
    ++cases;
  }
  EXPECT_EQ(cases, 7);
  EXPECT_EQ(mismatches, 0);
  std::printf("[ generation ] %d cases x 30 frames x 16 codebooks: mismatches %d, near-tie divergences %d; "
              "decoded wav max |diff| %.3g\n", cases, mismatches, near_ties, worst_wav);
}

TEST(BreezeGeneration, RejectsGuidanceWithoutAConditionAndBadSamplers) {
  const auto& f = fixture();
  GenerationParams p = default_generation_params(f.files.config);
  p.guidance = Guidance::kCfg;
  p.cfg_scale = 3;
  EXPECT_FALSE(BreezeGeneration::start(f.model, f.parts, p).ok());  // plain has nothing to guide by
  p.layout = Layout::kDesign;
  p.guidance = Guidance::kDual;
  EXPECT_FALSE(BreezeGeneration::start(f.model, f.parts, p).ok());  // dual needs a reference too
  p.guidance = Guidance::kNone;
  p.backbone.temperature = -1;
  EXPECT_FALSE(BreezeGeneration::start(f.model, f.parts, p).ok());
}

TEST(BreezeGeneration, SamplingIsSeededAndStopsAtMaxFrames) {
  const auto& f = fixture();
  GenerationParams p = default_generation_params(f.files.config);
  p.max_frames = 4;
  p.seed = 7;
  auto run = [&] {
    std::vector<int32_t> all, frame(16);
    auto gen = BreezeGeneration::start(f.model, f.parts, p);
    EXPECT_TRUE(gen.ok());
    while (gen.ok() && !gen->finished()) {
      auto more = gen->step(frame, nullptr);
      EXPECT_TRUE(more.ok());
      if (!more.ok() || !*more) break;
      all.insert(all.end(), frame.begin(), frame.end());
    }
    return all;
  };
  const auto a = run(), b = run();
  EXPECT_EQ(a, b);
  EXPECT_LE(a.size(), 4u * 16u);
  p.seed = 8;
  EXPECT_NE(run(), a);
}

}  // namespace
}  // namespace chorus::breeze_tts
