// The T5Gemma2 text encoder against the upstream goldens (an f32 run of the tiny model): the
// attention visibility patterns, RoPE frequencies and embedding scale, the eoi probe (scaled
// embeddings, layer 0, final output) and every text segment of the four prefill layouts, projected
// rows included.
#include <gtest/gtest.h>

#include <cstdio>

#include "breeze_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/text_encoder.h"

namespace chorus::breeze_tts {
namespace {

// f32 vs the f32 goldens; the numpy re-derivation of the reference agrees to 3e-6.
constexpr double kHiddenTol = 2e-5;
constexpr double kProjectedTol = 5e-5;

struct Fixture {
  ModelFiles files;
  TextEncoder encoder;
};

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto files = open_model_files(test::tiny_model_dir());
    if (!files.ok()) {
      ADD_FAILURE() << files.error().to_string();
      return static_cast<Fixture*>(nullptr);
    }
    auto enc = TextEncoder::create(files->config, files->main);
    if (!enc.ok()) {
      ADD_FAILURE() << enc.error().to_string();
      return static_cast<Fixture*>(nullptr);
    }
    return new Fixture{std::move(*files), std::move(*enc)};
  }();
  if (!f) throw std::runtime_error("tiny_breeze fixture failed to load");
  return *f;
}

// [L, H] row block `index` of a [K, L, H] tensor, as its own tensor.
Tensor slice(const Tensor& t, int64_t index) {
  const int64_t L = t.dim(1), H = t.dim(2);
  Tensor out = Tensor::zeros(DType::kF32, {L, H});
  std::copy(t.f32() + index * L * H, t.f32() + (index + 1) * L * H, out.f32());
  return out;
}

TEST(BreezeTextEncoder, VisibilityPatternsMatchTheGoldens) {
  test::Golden g("text_encoder");
  ASSERT_TRUE(g.ok());
  for (const auto& [name, type] : {std::pair{"visible_sliding_attention_12x12", TextLayerType::kSliding},
                                   std::pair{"visible_full_attention_12x12", TextLayerType::kFull}}) {
    const std::vector<int32_t> want = g.ids(name);
    ASSERT_EQ(want.size(), 144u);
    int visible = 0;
    for (int64_t i = 0; i < 12; ++i)
      for (int64_t j = 0; j < 12; ++j) {
        EXPECT_EQ(text_key_visible(i, j, type, 8), want[static_cast<size_t>(i * 12 + j)] != 0) << name << " " << i << "," << j;
        visible += want[static_cast<size_t>(i * 12 + j)] != 0;
      }
    EXPECT_GT(visible, 12) << name;  // not a diagonal-only (or empty) pattern
    if (type == TextLayerType::kSliding) {
      EXPECT_LT(visible, 144);
    }
  }
}

TEST(BreezeTextEncoder, RopeFrequenciesAndEmbedScaleMatchTheGoldens) {
  test::Golden g("text_encoder");
  const auto& cfg = fixture().files.config.text_encoder;
  for (const auto& [name, type] : {std::pair{"rope_inv_freq_sliding_attention", TextLayerType::kSliding},
                                   std::pair{"rope_inv_freq_full_attention", TextLayerType::kFull}}) {
    const Tensor want = g.f32(name);
    const std::vector<float> got = text_rope_inv_freq(cfg, type);
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want.f32()[i]) << name << "[" << i << "]";
  }
  EXPECT_EQ(fixture().encoder.embed_scale(), g.f32("embed_scale").f32()[0]);
  // Spec §4.1: bf16 rounds sqrt(1152) to 34.0; f32 keeps 33.941125.
  EXPECT_EQ(text_embed_scale(1152, Activations::kBF16), 34.0f);
  EXPECT_NEAR(text_embed_scale(1152, Activations::kF32), 33.941125, 1e-5);
}

TEST(BreezeTextEncoder, EoiProbeMatchesTheGoldenLayerByLayer) {
  test::Golden g("text_encoder");
  const std::vector<int32_t> ids = g.ids("eoi_probe_ids");
  ASSERT_EQ(ids.size(), 13u);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 480), 1);  // the probe holds one eoi token
  TextEncoderTrace trace;
  auto out = fixture().encoder.encode(ids, nullptr, &trace);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  const Tensor states = g.f32("eoi_probe_hidden_states");
  const double e_emb = test::max_abs_diff(trace.embeddings, slice(states, 0));
  const double e_l0 = test::max_abs_diff(trace.layer_outputs.at(0), slice(states, 1));
  const double e_out = test::max_abs_diff(*out, slice(states, 2));
  const double e_last = test::max_abs_diff(*out, g.f32("eoi_probe_last_hidden"));
  EXPECT_LE(e_emb, 1e-6);
  EXPECT_LE(e_l0, kHiddenTol);
  EXPECT_LE(e_out, kHiddenTol);
  EXPECT_LE(e_last, kHiddenTol);
  // The eoi row is the stored embedding, unscaled.
  const Tensor eoi = g.f32("eoi_embedding");
  const int64_t pos = std::find(ids.begin(), ids.end(), 480) - ids.begin();
  for (int64_t i = 0; i < 72; ++i) EXPECT_EQ(trace.embeddings.f32()[pos * 72 + i], eoi.f32()[i]);
  std::printf("[ eoi probe ] max |diff|: embeddings %.3g, layer 0 %.3g, output %.3g\n", e_emb, e_l0, e_out);
}

TEST(BreezeTextEncoder, EverySegmentOfEveryPrefillLayoutMatches) {
  double worst_hidden = 0, worst_unpadded = 0, worst_proj = 0;
  int segments = 0;
  for (const char* layout : {"plain", "clone", "design", "direction"}) {
    test::Golden g(std::string("prefill_") + layout);
    ASSERT_TRUE(g.ok());
    for (int s = 0; g.has("te_seg" + std::to_string(s) + "_ids"); ++s) {
      SCOPED_TRACE(std::string(layout) + " segment " + std::to_string(s));
      const std::string p = "te_seg" + std::to_string(s) + "_";
      const std::vector<int32_t> ids = g.ids(p + "ids");
      TextEncoderTrace trace;
      auto out = fixture().encoder.encode(ids, &ThreadPool::global(), &trace);
      ASSERT_TRUE(out.ok()) << out.error().to_string();
      const Tensor states = g.f32(p + "hidden_states");
      EXPECT_LE(test::max_abs_diff(trace.embeddings, slice(states, 0)), 1e-6);
      EXPECT_LE(test::max_abs_diff(trace.layer_outputs.at(0), slice(states, 1)), kHiddenTol);
      const double e_unpadded = test::max_abs_diff(*out, slice(states, 2));
      // te_seg*_hidden comes from upstream's padded batch, which differs from an unpadded run by
      // up to 1.5e-6 (README).
      const double e_hidden = test::max_abs_diff(*out, g.f32(p + "hidden"));
      const double e_proj = test::max_abs_diff(fixture().encoder.project(*out), g.f32(p + "projected"));
      EXPECT_LE(e_unpadded, kHiddenTol);
      EXPECT_LE(e_hidden, kHiddenTol);
      EXPECT_LE(e_proj, kProjectedTol);
      worst_unpadded = std::max(worst_unpadded, e_unpadded);
      worst_hidden = std::max(worst_hidden, e_hidden);
      worst_proj = std::max(worst_proj, e_proj);
      ++segments;
    }
  }
  // plain 1 + clone 2 + design 1 + direction 2 segments.
  EXPECT_EQ(segments, 6);
  std::printf("[ segments ] max |diff|: output %.3g (padded golden %.3g), projected %.3g\n", worst_unpadded,
              worst_hidden, worst_proj);
}

TEST(BreezeTextEncoder, Bf16ModeStaysCloseToF32AndRoundsItsOutput) {
  const auto& f = fixture();
  auto bf = TextEncoder::create(f.files.config, f.files.main, Activations::kBF16);
  ASSERT_TRUE(bf.ok()) << bf.error().to_string();
  test::Golden g("prefill_direction");
  const std::vector<int32_t> ids = g.ids("te_seg1_ids");
  auto a = f.encoder.encode_projected(ids);
  auto b = bf->encode_projected(ids);
  ASSERT_TRUE(a.ok() && b.ok());
  double worst = 0, scale = 0;
  bool all_bf16 = true;
  for (int64_t i = 0; i < a->numel(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a->f32()[i] - b->f32()[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a->f32()[i])));
    all_bf16 &= round_to_bf16(b->f32()[i]) == b->f32()[i];
  }
  EXPECT_TRUE(all_bf16);
  EXPECT_GT(worst, 0.0);            // the mode does change the numbers...
  EXPECT_LT(worst, 0.1 * scale);    // ...by bf16-sized amounts
  EXPECT_EQ(bf->embed_scale(), 8.5f);  // sqrt(72) = 8.485 in bf16
}

TEST(BreezeTextEncoder, BadSegmentsAreErrors) {
  const auto& enc = fixture().encoder;
  EXPECT_EQ(enc.encode(std::vector<int32_t>{}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(enc.encode(std::vector<int32_t>{2, 512}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(enc.encode(std::vector<int32_t>{2, -1}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(enc.encode(std::vector<int32_t>{2, 511}).ok());
}

}  // namespace
}  // namespace chorus::breeze_tts
