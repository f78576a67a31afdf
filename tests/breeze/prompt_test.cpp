// Prompt layouts and prefill rows against the upstream goldens: the four templates built from the
// raw ids in manifest.json must give the golden input_ids, row kinds and text segments, and the rows
// (projected encoder output per segment, 16-row sums for reference frames, the audio-EOS row) must
// match inputs_embeds.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/prompt.h"
#include "models/breeze_tts/weights.h"

namespace chorus::breeze_tts {
namespace {

constexpr double kRowTol = 5e-5;

struct Fixture {
  ModelFiles files;
  TextEncoder encoder;
  PromptParts parts;  // TEXT, INSTR, REF_TEXT and the reference codes of the goldens
};

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto files = open_model_files(test::tiny_model_dir());
    if (!files.ok()) throw std::runtime_error(files.error().to_string());
    auto enc = TextEncoder::create(files->config, files->main);
    if (!enc.ok()) throw std::runtime_error(enc.error().to_string());
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    const auto ids = nlohmann::json::parse(in)["prompt_token_ids"];
    PromptParts p;
    p.text = ids["TEXT"].get<std::vector<int32_t>>();
    p.instruct = ids["INSTR"].get<std::vector<int32_t>>();
    p.ref_text = ids["REF_TEXT"].get<std::vector<int32_t>>();
    test::Golden clone("prefill_clone");
    p.ref.codes = clone.ids("input_values");
    p.ref.frames = static_cast<int64_t>(p.ref.codes.size()) / 16;
    return new Fixture{std::move(*files), std::move(*enc), std::move(p)};
  }();
  return *f;
}

struct LayoutCase {
  const char* golden;
  Layout layout;
  int64_t rows;  // README
};
const LayoutCase kLayouts[] = {{"prefill_plain", Layout::kPlain, 16},
                               {"prefill_clone", Layout::kClone, 40},
                               {"prefill_design", Layout::kDesign, 24},
                               {"prefill_direction", Layout::kDirection, 48}};

TEST(BreezePrompt, LayoutsMatchTheGoldenIdsRowKindsAndSegments) {
  const auto& f = fixture();
  ASSERT_EQ(f.parts.ref.frames, 12);
  for (const auto& lc : kLayouts) {
    SCOPED_TRACE(lc.golden);
    test::Golden g(lc.golden);
    auto l = build_layout(f.files.config, lc.layout, f.parts);
    ASSERT_TRUE(l.ok()) << l.error().to_string();
    EXPECT_EQ(l->rows(), lc.rows);
    EXPECT_EQ(l->input_ids, g.ids("input_ids"));
    std::vector<int32_t> kinds;
    for (RowKind k : l->row_kind) kinds.push_back(static_cast<int32_t>(k));
    EXPECT_EQ(kinds, g.ids("row_kind"));
    std::vector<int32_t> lens;
    for (const auto& s : l->text_segments) lens.push_back(static_cast<int32_t>(s.size()));
    EXPECT_EQ(lens, g.ids("text_ids_len"));
    for (size_t s = 0; s < l->text_segments.size(); ++s)
      EXPECT_EQ(l->text_segments[s], g.ids("te_seg" + std::to_string(s) + "_ids")) << "segment " << s;
  }
}

TEST(BreezePrompt, PrefillRowsMatchTheGoldenInputsEmbeds) {
  const auto& f = fixture();
  const Tensor table = f.files.main.tensor(kAudioTable);
  double worst = 0, worst_audio = 0;
  for (const auto& lc : kLayouts) {
    SCOPED_TRACE(lc.golden);
    test::Golden g(lc.golden);
    auto l = build_layout(f.files.config, lc.layout, f.parts);
    ASSERT_TRUE(l.ok()) << l.error().to_string();
    auto rows = prompt_rows(f.files.config, *l, f.parts.ref, f.encoder, table, &ThreadPool::global());
    ASSERT_TRUE(rows.ok()) << rows.error().to_string();
    const Tensor want = g.f32("inputs_embeds");
    const double e = test::max_abs_diff(*rows, want);
    EXPECT_LE(e, kRowTol);
    worst = std::max(worst, e);
    for (int64_t r = 0; r < l->rows(); ++r) {
      if (l->row_kind[static_cast<size_t>(r)] == RowKind::kText) continue;
      worst_audio = std::max(worst_audio, test::max_abs_diff(rows->f32() + r * 64, want.f32() + r * 64, 64));
    }
  }
  EXPECT_LE(worst_audio, 1e-5);
  std::printf("[ prefill rows ] max |diff| %.3g (audio and audio-EOS rows %.3g)\n", worst, worst_audio);
}

TEST(BreezePrompt, SpeakerTagAndMissingPartsAndBadIds) {
  const auto& f = fixture();
  const Config& c = f.files.config;
  PromptParts p = f.parts;
  p.speaker = 2;
  auto l = build_layout(c, Layout::kDirection, p);
  ASSERT_TRUE(l.ok());
  // Both segments carry [S2] (id 502) right after their <bos>.
  for (const auto& seg : l->text_segments) {
    ASSERT_GE(seg.size(), 2u);
    EXPECT_EQ(seg[0], 2);
    EXPECT_EQ(seg[1], 502);
  }
  auto expect_bad = [&](Layout layout, const PromptParts& parts, const char* mention) {
    auto r = build_layout(c, layout, parts);
    ASSERT_FALSE(r.ok()) << mention;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find(mention), std::string::npos) << r.error().to_string();
  };
  p = f.parts;
  p.speaker = 10;
  expect_bad(Layout::kPlain, p, "[S10]");
  p = f.parts;
  p.text.clear();
  expect_bad(Layout::kPlain, p, "text");
  p = f.parts;
  p.instruct.clear();
  expect_bad(Layout::kDesign, p, "instruction");
  EXPECT_TRUE(build_layout(c, Layout::kPlain, p).ok());  // plain does not need one
  p = f.parts;
  p.ref.codes[5] = 2048;  // reserved, not a codec code
  expect_bad(Layout::kClone, p, "2048");
  p = f.parts;
  p.ref.codes.pop_back();
  expect_bad(Layout::kClone, p, "values for");
  p = f.parts;
  p.text.push_back(498);  // <|AUDIO|>
  expect_bad(Layout::kPlain, p, "placeholder");
  p = f.parts;
  p.ref_text.push_back(512);
  expect_bad(Layout::kDirection, p, "outside the text vocabulary");
}

}  // namespace
}  // namespace chorus::breeze_tts
