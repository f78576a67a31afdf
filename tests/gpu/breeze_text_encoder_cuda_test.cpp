// The Breeze TTS 2 text encoder on the GPU (models/breeze_tts/text_encoder_cuda.h) against the
// upstream goldens (an f32 run of the tiny model: the eoi probe, every te_seg* of the four prefill
// layouts, projected rows, inputs_embeds) and against the CPU TextEncoder on the same ids, in both
// activation modes; segments encoded in one packed batch must equal segments encoded alone (no
// attention across segments).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze/breeze_test_util.h"
#include "gpu_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/generation.h"
#include "models/breeze_tts/prompt.h"
#include "models/breeze_tts/text_encoder_cuda.h"

namespace chorus::gpu_test {
namespace {

namespace bt = breeze_tts;

// Same bf16 weights; activations f32 on both sides. Packed segments exceed the matrix-vector row
// limit, so products go through cuBLAS with split bf16 inputs (about 2^-17 relative each) and
// sums in another order: a few 1e-6 on O(1) values. The CPU matches the goldens to 2e-5; a wrong
// window, RoPE base, norm or segment boundary gives errors of order 0.1 and more.
constexpr double kHiddenTol = 1e-4;
constexpr double kProjectedTol = 2e-4;
// bf16 mode: both sides round at the same points, but a value within an f32 ulp of a bf16 rounding
// boundary may round the other way and move by one bf16 step (2^-8 relative), which later layers
// carry along. Bounded relative to the output scale.
constexpr double kBf16RelTol = 0.03;

struct Fixture {
  bt::ModelFiles files;
  bt::BreezeModel model;
  std::unique_ptr<bt::gpu::TextEncoderCuda> gpu;
  bt::PromptParts parts;
};

const Fixture* fixture() {
  static const Fixture* f = []() -> const Fixture* {
    auto files = bt::open_model_files(bt::test::tiny_model_dir());
    EXPECT_TRUE(files.ok()) << files.error().to_string();
    if (!files.ok()) return nullptr;
    auto model = bt::BreezeModel::load(*files);
    EXPECT_TRUE(model.ok()) << model.error().to_string();
    if (!model.ok()) return nullptr;
    auto gpu = bt::gpu::TextEncoderCuda::upload(files->config, files->main);
    EXPECT_TRUE(gpu.ok()) << gpu.error().to_string();
    if (!gpu.ok()) return nullptr;
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    const auto ids = nlohmann::json::parse(in)["prompt_token_ids"];
    bt::PromptParts p;
    p.text = ids["TEXT"].get<std::vector<int32_t>>();
    p.instruct = ids["INSTR"].get<std::vector<int32_t>>();
    p.ref_text = ids["REF_TEXT"].get<std::vector<int32_t>>();
    p.ref.codes = bt::test::Golden("prefill_clone").ids("input_values");
    p.ref.frames = static_cast<int64_t>(p.ref.codes.size()) / 16;
    return new Fixture{std::move(*files), std::move(*model), std::move(*gpu), std::move(p)};
  }();
  return f;
}

#define REQUIRE_FIXTURE()                      \
  REQUIRE_GPU();                               \
  const Fixture* fx = fixture();               \
  ASSERT_NE(fx, nullptr) << "fixture failed";

// Row block `index` of a [K, L, H] golden.
Tensor slice(const Tensor& t, int64_t index) {
  const int64_t L = t.dim(1), H = t.dim(2);
  Tensor out = Tensor::zeros(DType::kF32, {L, H});
  std::copy(t.f32() + index * L * H, t.f32() + (index + 1) * L * H, out.f32());
  return out;
}

struct Segment {
  std::string name;
  std::vector<int32_t> ids;
  Tensor hidden, projected;  // goldens
};

// The six text segments of the prefill goldens (plain 1, clone 2, design 1, direction 2).
std::vector<Segment> golden_segments() {
  std::vector<Segment> out;
  for (const char* layout : {"plain", "clone", "design", "direction"}) {
    bt::test::Golden g(std::string("prefill_") + layout);
    for (int s = 0; g.has("te_seg" + std::to_string(s) + "_ids"); ++s) {
      const std::string p = "te_seg" + std::to_string(s) + "_";
      out.push_back({std::string(layout) + " " + std::to_string(s), g.ids(p + "ids"),
                     slice(g.f32(p + "hidden_states"), 2), g.f32(p + "projected")});
    }
  }
  return out;
}

TEST(BreezeTextEncoderGpu, EoiProbeMatchesTheGolden) {
  REQUIRE_FIXTURE();
  bt::test::Golden g("text_encoder");
  const std::vector<std::vector<int32_t>> segs{g.ids("eoi_probe_ids")};
  ASSERT_EQ(segs[0].size(), 13u);
  auto out = fx->gpu->encode(segs, bt::Activations::kF32, false);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  ASSERT_EQ(out->size(), 1u);
  const double e = bt::test::max_abs_diff((*out)[0], g.f32("eoi_probe_last_hidden"));
  EXPECT_LE(e, kHiddenTol);
  std::printf("[ gpu eoi probe ] max |diff| vs golden %.3g\n", e);
}

TEST(BreezeTextEncoderGpu, PackedSegmentsMatchTheGoldensTheCpuAndThemselvesAlone) {
  REQUIRE_FIXTURE();
  const std::vector<Segment> segs = golden_segments();
  ASSERT_EQ(segs.size(), 6u);
  std::vector<std::vector<int32_t>> ids;
  for (const Segment& s : segs) ids.push_back(s.ids);
  auto hidden = fx->gpu->encode(ids, bt::Activations::kF32, false);
  auto projected = fx->gpu->encode(ids, bt::Activations::kF32, true);
  ASSERT_TRUE(hidden.ok()) << hidden.error().to_string();
  ASSERT_TRUE(projected.ok()) << projected.error().to_string();
  ASSERT_EQ(hidden->size(), segs.size());
  ASSERT_EQ(projected->size(), segs.size());
  double w_golden = 0, w_proj = 0, w_cpu = 0, w_alone = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    SCOPED_TRACE(segs[i].name);
    const double e_golden = bt::test::max_abs_diff((*hidden)[i], segs[i].hidden);
    const double e_proj = bt::test::max_abs_diff((*projected)[i], segs[i].projected);
    auto cpu = fx->model.encoder.encode(segs[i].ids);
    ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
    const double e_cpu = bt::test::max_abs_diff((*hidden)[i], *cpu);
    // Alone: one segment per call (short segments take the matrix-vector path).
    auto alone = fx->gpu->encode(std::span(&ids[i], 1), bt::Activations::kF32, false);
    ASSERT_TRUE(alone.ok()) << alone.error().to_string();
    const double e_alone = bt::test::max_abs_diff((*hidden)[i], (*alone)[0]);
    EXPECT_LE(e_golden, kHiddenTol);
    EXPECT_LE(e_proj, kProjectedTol);
    EXPECT_LE(e_cpu, kHiddenTol);
    EXPECT_LE(e_alone, kHiddenTol);
    w_golden = std::max(w_golden, e_golden), w_proj = std::max(w_proj, e_proj);
    w_cpu = std::max(w_cpu, e_cpu), w_alone = std::max(w_alone, e_alone);
  }
  std::printf("[ gpu segments ] max |diff|: vs golden %.3g, projected vs golden %.3g, vs cpu %.3g, packed vs alone %.3g\n",
              w_golden, w_proj, w_cpu, w_alone);
}

TEST(BreezeTextEncoderGpu, Bf16ModeMatchesTheCpuBf16Mode) {
  REQUIRE_FIXTURE();
  const std::vector<Segment> segs = golden_segments();
  std::vector<std::vector<int32_t>> ids;
  for (const Segment& s : segs) ids.push_back(s.ids);
  auto gpu16 = fx->gpu->encode(ids, bt::Activations::kBF16, true);
  auto gpu32 = fx->gpu->encode(ids, bt::Activations::kF32, true);
  ASSERT_TRUE(gpu16.ok() && gpu32.ok());
  double worst = 0, scale = 0, mode_gap = 0;
  int64_t same = 0, total = 0;
  bool all_bf16 = true;
  for (size_t i = 0; i < segs.size(); ++i) {
    auto cpu = fx->model.encoder_bf16.encode_projected(segs[i].ids);
    ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
    const Tensor& g = (*gpu16)[i];
    worst = std::max(worst, bt::test::max_abs_diff(g, *cpu));
    mode_gap = std::max(mode_gap, bt::test::max_abs_diff(g, (*gpu32)[i]));
    for (int64_t k = 0; k < cpu->numel(); ++k) {
      scale = std::max(scale, static_cast<double>(std::fabs(cpu->f32()[k])));
      all_bf16 &= round_to_bf16(g.f32()[k]) == g.f32()[k];
      same += g.f32()[k] == cpu->f32()[k];
      ++total;
    }
  }
  EXPECT_TRUE(all_bf16);
  EXPECT_GT(mode_gap, 0.0);  // the mode really rounds
  EXPECT_LE(worst, kBf16RelTol * scale);
  // Rounding flips are rare (products of bf16 inputs differ by f32 summation order only), so most
  // outputs are bit-identical; a missing or extra rounding point leaves far fewer.
  const double identical = static_cast<double>(same) / static_cast<double>(std::max<int64_t>(1, total));
  EXPECT_GE(identical, 0.5);
  std::printf("[ gpu bf16 ] max |diff| vs cpu bf16 %.3g (output scale %.3g; bf16 vs f32 mode %.3g); %.1f%% of %lld "
              "outputs bit-identical\n",
              worst, scale, mode_gap, 100.0 * identical, static_cast<long long>(total));
}

// Longer random segments than the goldens' (more keys than threads per attention block, windows
// clipped at both ends), packed with a one-token segment, vs the CPU encoder.
TEST(BreezeTextEncoderGpu, LongRandomSegmentsMatchTheCpu) {
  REQUIRE_FIXTURE();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, 400);  // ordinary ids of the tiny vocabulary (eoi is 480)
  std::vector<std::vector<int32_t>> segs(3);
  for (int i = 0; i < 300; ++i) segs[0].push_back(tok(rng));
  segs[1] = {2};
  for (int i = 0; i < 37; ++i) segs[2].push_back(tok(rng));
  segs[2][5] = 480;  // an eoi row inside a packed batch
  auto gpu = fx->gpu->encode(segs, bt::Activations::kF32, true);
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  double worst = 0;
  for (size_t i = 0; i < segs.size(); ++i) {
    auto cpu = fx->model.encoder.encode_projected(segs[i]);
    ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
    const double e = bt::test::max_abs_diff((*gpu)[i], *cpu);
    EXPECT_LE(e, kProjectedTol) << "segment " << i;
    worst = std::max(worst, e);
  }
  std::printf("[ gpu long segments ] max |diff| vs cpu %.3g (300 + 1 + 37 tokens, projected)\n", worst);
}

// The engine's GPU path: every layout's prefill rows from one packed encoder call equal the CPU's
// prompt_rows and the goldens' inputs_embeds.
TEST(BreezeTextEncoderGpu, PromptRowsEqualTheCpuAndTheGoldens) {
  REQUIRE_FIXTURE();
  const bt::Config& c = fx->files.config;
  const std::pair<const char*, bt::Layout> cases[] = {{"prefill_plain", bt::Layout::kPlain},
                                                      {"prefill_clone", bt::Layout::kClone},
                                                      {"prefill_design", bt::Layout::kDesign},
                                                      {"prefill_direction", bt::Layout::kDirection}};
  std::vector<bt::PromptLayout> layouts;
  for (const auto& [name, l] : cases) {
    auto pl = bt::build_layout(c, l, fx->parts);
    ASSERT_TRUE(pl.ok()) << pl.error().to_string();
    layouts.push_back(std::move(*pl));
  }
  auto rows = bt::gpu::prompt_rows_cuda(c, layouts, fx->parts.ref, *fx->gpu, fx->model.audio_table);
  ASSERT_TRUE(rows.ok()) << rows.error().to_string();
  ASSERT_EQ(rows->size(), layouts.size());
  double w_cpu = 0, w_golden = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    auto cpu = bt::prompt_rows(c, layouts[i], fx->parts.ref, fx->model.encoder, fx->model.audio_table);
    ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
    const double e_cpu = bt::test::max_abs_diff((*rows)[i], *cpu);
    const double e_golden = bt::test::max_abs_diff((*rows)[i], bt::test::Golden(cases[i].first).f32("inputs_embeds"));
    EXPECT_LE(e_cpu, kProjectedTol);
    EXPECT_LE(e_golden, kProjectedTol);
    w_cpu = std::max(w_cpu, e_cpu), w_golden = std::max(w_golden, e_golden);
  }
  std::printf("[ gpu prompt rows ] max |diff|: vs cpu %.3g, vs golden inputs_embeds %.3g\n", w_cpu, w_golden);
}

TEST(BreezeTextEncoderGpu, BadSegmentsAreErrors) {
  REQUIRE_FIXTURE();
  // -1: the call succeeded.
  const auto code = [&](std::vector<std::vector<int32_t>> segs) {
    auto r = fx->gpu->encode(segs, bt::Activations::kF32, true);
    return r.ok() ? -1 : static_cast<int>(r.error().code);
  };
  const int invalid = static_cast<int>(ErrorCode::kInvalidArgument);
  const int32_t vocab = static_cast<int32_t>(fx->files.config.text_vocab);
  EXPECT_EQ(code({{2, 3}, {}}), invalid);
  EXPECT_EQ(code({{2, vocab}}), invalid);
  EXPECT_EQ(code({{2, -1}}), invalid);
  EXPECT_EQ(code({{2, vocab - 1}, {2}}), -1);
  EXPECT_EQ(code({}), -1);
}

}  // namespace
}  // namespace chorus::gpu_test
