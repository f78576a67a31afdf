// The decoder against the official PyTorch decoder's outputs on the tiny reference codec:
// every stage of a 12-frame decode, the full 400-frame decode, and the official chunked decode.
#include <gtest/gtest.h>

#include <cstdio>

#include "codec_test_util.h"
#include "models/codec/codec_folder.h"
#include "runtime/cpu/kernels.h"
#include "support/test_support.h"

namespace chorus::codec::test {
namespace {

class CodecGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_codec(tiny_codec_dir());
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = std::make_unique<CodecModel>(std::move(m).value());
  }
  std::unique_ptr<CodecModel> model_;
};

// Absolute tolerance relative to the reference's own scale: the decoder is ~40 layers deep in f32,
// and PyTorch sums in a different order (oneDNN convolutions, blocked GEMMs).
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                  double rel_tol) {
  ASSERT_FALSE(want.empty()) << what;
  const Diff d = compare(got, want);
  std::printf("  %-22s max |err| %.3g  (reference max %.3g, rms %.3g)\n", what.c_str(), d.max_abs, d.max_ref,
              d.rms_ref);
  ASSERT_GT(d.rms_ref, 1e-3) << what << ": reference is (nearly) all zeros, the comparison would be vacuous";
  EXPECT_LE(d.max_abs, rel_tol * d.max_ref) << what << " worst at index " << d.argmax;
}

TEST_F(CodecGolden, TwelveFramesEveryStage) {
  const auto g = open_golden("qwen3_tts/goldens/decoder_12.safetensors");
  Shape cs;
  const auto codes = golden_i32(g, "codes", &cs);
  ASSERT_EQ(cs, (Shape{12, 16}));
  const Decoder& dec = model_->decoder;
  DecoderState state = dec.new_state();
  StageCollector col;
  state.set_tap(col.tap());
  std::vector<float> wav;
  ASSERT_TRUE(dec.decode(state, codes.data(), 12, wav).ok());

  // pre_transformer is stored time-major [T, latent]; our tap is channels-first.
  for (const char* name : {"dequant", "pre_conv", "upsample0_0", "upsample0_1", "upsample1_0", "upsample1_1",
                           "decoder0", "decoder1", "decoder2", "decoder3", "decoder4", "decoder5", "decoder6"}) {
    Shape s;
    const auto want = golden_f32(g, name, &s);
    int64_t ch = 0, steps = 0;
    const auto got = col.get(name, &ch, &steps);
    ASSERT_EQ(s, (Shape{ch, steps})) << name;
    expect_close(name, got, want, 2e-5);
  }
  {
    Shape s;
    const auto want_tm = golden_f32(g, "pre_transformer", &s);
    int64_t ch = 0, steps = 0;
    const auto got = col.get("pre_transformer", &ch, &steps);
    ASSERT_EQ(s, (Shape{steps, ch}));
    std::vector<float> want(want_tm.size());
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t c = 0; c < ch; ++c) want[c * steps + t] = want_tm[t * ch + c];
    expect_close("pre_transformer", got, want, 2e-5);
  }
  expect_close("wav", wav, golden_f32(g, "wav"), 2e-5);
}

TEST_F(CodecGolden, FourHundredFramesFullDecode) {
  const auto g = open_golden("qwen3_tts/goldens/decoder_400.safetensors");
  const auto codes = golden_i32(g, "codes");
  ASSERT_EQ(codes.size(), 400u * 16);
  auto wav = model_->decoder.decode_all(codes.data(), 400, DecodeMode::kExact);
  ASSERT_TRUE(wav.ok()) << wav.error().to_string();
  expect_close("wav_full", *wav, golden_f32(g, "wav_full"), 2e-5);
}

TEST_F(CodecGolden, FourHundredFramesOfficialChunkedDecode) {
  const auto g = open_golden("qwen3_tts/goldens/decoder_400.safetensors");
  const auto codes = golden_i32(g, "codes");
  ASSERT_EQ(codes.size(), 400u * 16);
  auto wav = model_->decoder.decode_all(codes.data(), 400, DecodeMode::kOfficialChunked);
  ASSERT_TRUE(wav.ok()) << wav.error().to_string();
  const auto want = golden_f32(g, "wav_chunked_official");
  expect_close("wav_chunked_official", *wav, want, 2e-5);
  // The two references differ after frame 300, so matching both is not the same check twice.
  const Diff between = compare(golden_f32(g, "wav_full"), want);
  EXPECT_GT(between.max_abs, 0.05);
}

// Breeze TTS 2 ships the same codec as audio_tokenizer/; its generation goldens hold the official
// decode of each case's 30 frames.
TEST(CodecGoldenBreeze, AudioTokenizerFolderDecodesGenerationGoldens) {
  const std::string model_dir = chorus::test::reference_path("breeze_tts2/models/tiny_breeze");
  auto m = load_codec(model_dir);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  EXPECT_NE(m->dir.find("audio_tokenizer"), std::string::npos);
  const auto g = open_golden("breeze_tts2/goldens/gen_plain.safetensors");
  Shape s;
  const auto codes = golden_i32(g, "codes", &s);
  ASSERT_EQ(s.size(), 2u);
  ASSERT_EQ(s[1], 16);
  auto wav = m->decoder.decode_all(codes.data(), s[0]);
  ASSERT_TRUE(wav.ok()) << wav.error().to_string();
  expect_close("breeze gen_plain wav", *wav, golden_f32(g, "wav"), 2e-5);
}

}  // namespace
}  // namespace chorus::codec::test
