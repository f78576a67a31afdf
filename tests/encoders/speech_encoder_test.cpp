// The speech encoder (SEANet, transformer, downsample, split RVQ) against the official
// Qwen3TTSTokenizer.encode on the tiny codec (goldens/speech_encoder.safetensors): every stage's
// output within float tolerance and the 16 kept codebooks identical, for the 3 s test wave and for
// its first second. Plus block-size independence and input errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>

#include "encoder_test_util.h"
#include "models/codec/speech_encoder.h"
#include "speech_encoder_reference.h"

namespace chorus::test {
namespace {

using codec::EncodedCodes;
using codec::SpeechEncoder;

const SpeechEncoder& encoder() {
  static const SpeechEncoder enc = [] {
    const auto& f = tiny_base_files();
    EXPECT_TRUE(f.codec_has_encoder);
    auto e = SpeechEncoder::load(f.codec, f.config.codec);
    if (!e.ok()) {
      ADD_FAILURE() << e.error().to_string();
      std::abort();
    }
    e->set_thread_pool(nullptr);
    return std::move(e).value();
  }();
  return enc;
}

struct Stages {
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, Shape> shape;
};

EncodedCodes encode_with_stages(const SpeechEncoder& enc, const std::vector<float>& wave, Stages* st) {
  codec::detail::StageTap tap = [&](const std::string& name, const float* d, int64_t rows, int64_t cols) {
    st->data[name].assign(d, d + rows * cols);
    st->shape[name] = {rows, cols};
  };
  auto r = enc.encode(wave.data(), static_cast<int64_t>(wave.size()), tap);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? std::move(r).value() : EncodedCodes{};
}

TEST(SpeechEncoder, StagesMatchTheOfficialEncoder) {
  const GoldenFile g = golden("speech_encoder");
  const auto wave = g.f32("wave_3s");
  ASSERT_EQ(wave.size(), 72000u);
  Stages st;
  encode_with_stages(encoder(), wave, &st);
  for (const char* name : {"seanet", "transformer", "downsample"}) {
    SCOPED_TRACE(name);
    const auto ref = g.f32(name);
    ASSERT_EQ(st.shape[name], g.shape(name));
    ASSERT_EQ(st.data[name].size(), ref.size());
    const Diff d = compare(st.data[name].data(), ref);
    EXPECT_FALSE(d.bad);
    EXPECT_GT(d.max_ref, 0.1);  // not a vacuous comparison of near-zero tensors
    EXPECT_LT(d.max_abs, 2e-5 * std::max(1.0, d.max_ref));
    std::printf("[speech encoder] %-12s %s max |err| %.2e (max |ref| %.3f)\n", name,
                shape_to_string(g.shape(name)).c_str(), d.max_abs, d.max_ref);
  }
}

// Codes: identical to the official ones except at decisions that exact arithmetic shows to be
// near ties (see compare_codes; the tiny model's deep codebooks quantise residuals of ~1e-4, where
// f32 noise of ~1e-6 in either implementation can reorder two candidates). Exact arithmetic itself
// reproduces every official code (speech_encoder_reference_test.cpp).
TEST(SpeechEncoder, CodesMatchTheOfficialEncoderForThreeSecondsAndOneSecond) {
  const GoldenFile g = golden("speech_encoder");
  const auto wave = g.f32("wave_3s");
  const int64_t H = 32;
  double err_official = 0;  // the official f32 downsample output against exact arithmetic (3 s run)
  for (const auto& [name, samples] : {std::pair<const char*, size_t>{"codes_3s", 72000}, {"codes_1s", 24000}}) {
    SCOPED_TRACE(name);
    const std::vector<float> w(wave.begin(), wave.begin() + samples);
    Stages st;
    const EncodedCodes r = encode_with_stages(encoder(), w, &st);
    const auto want = g.i32(name);
    ASSERT_EQ((Shape{r.frames, r.codebooks}), g.shape(name));
    ASSERT_EQ(r.codes.size(), want.size());
    const ReferenceEncoding exact = reference_encode(tiny_base_files(), std::vector<double>(w.begin(), w.end()));
    const auto& xd = exact.stages.at("downsample");
    ASSERT_EQ(xd.size(), static_cast<size_t>(H * r.frames));
    if (samples == 72000) {
      const auto gd = g.f32("downsample");
      for (size_t i = 0; i < xd.size(); ++i) err_official = std::max(err_official, std::fabs(gd[i] - xd[i]));
    }
    double err_ours = 0;
    for (size_t i = 0; i < xd.size(); ++i) err_ours = std::max(err_ours, std::fabs(st.data["downsample"][i] - xd[i]));
    // The near-tie bound is only meaningful while both pipelines are this close to exact arithmetic.
    EXPECT_LT(err_ours, 1e-5);
    EXPECT_LT(err_official, 1e-5);
    const CodeComparison cmp = compare_codes(tiny_base_files(), xd, r.frames, r.codes, want, err_ours, err_official);
    EXPECT_EQ(cmp.unexplained, 0) << cmp.first_unexplained;
    EXPECT_LE(cmp.near_ties, 1);  // a guard against a tolerance that excuses everything
    EXPECT_LE(cmp.differing, 4);
    // Guard: the golden codes are diverse in every codebook (a constant answer cannot pass).
    for (int64_t k = 0; k < r.codebooks; ++k) {
      std::set<int32_t> distinct;
      for (int64_t f = 0; f < r.frames; ++f) distinct.insert(want[f * r.codebooks + k]);
      EXPECT_GE(distinct.size(), 8u) << "codebook " << k;
    }
    std::printf("[speech encoder] %s: %lld frames x %lld codebooks; %d of %zu codes differ (%d near ties, %d following "
                "them); %d decisions are near ties by the bound; downsample vs f64: ours %.2e, official %.2e\n",
                name, static_cast<long long>(r.frames), static_cast<long long>(r.codebooks), cmp.differing, want.size(),
                cmp.near_ties, cmp.cascaded, cmp.decisions_within_bound, err_ours, err_official);
  }
}

// The SEANet runs block by block with per-conv histories; the result must not depend on the block
// size (one frame, odd sizes, one block for everything), bitwise.
TEST(SpeechEncoder, BlockSizeDoesNotChangeAnything) {
  const GoldenFile g = golden("speech_encoder");
  const auto full = g.f32("wave_3s");
  const std::vector<float> wave(full.begin(), full.begin() + 50000);  // not a whole number of frames
  SpeechEncoder enc = encoder();
  Stages ref;
  ASSERT_TRUE(enc.set_block_samples(SpeechEncoder::kMaxSamples).ok());
  const EncodedCodes want = encode_with_stages(enc, wave, &ref);
  ASSERT_EQ(want.frames, 27);  // ceil(50000 / 1920)
  for (int64_t block : {1, 960, 961, 5000, 24000}) {
    SCOPED_TRACE(block);
    ASSERT_TRUE(enc.set_block_samples(block).ok());
    Stages st;
    const EncodedCodes got = encode_with_stages(enc, wave, &st);
    EXPECT_EQ(got.codes, want.codes);
    EXPECT_EQ(st.data["seanet"], ref.data["seanet"]);
  }
  EXPECT_FALSE(enc.set_block_samples(0).ok());
}

TEST(SpeechEncoder, ThreadsDoNotChangeTheCodes) {
  const GoldenFile g = golden("speech_encoder");
  const auto wave = g.f32("wave_3s");
  SpeechEncoder enc = encoder();
  ThreadPool pool(3);
  enc.set_thread_pool(&pool);
  auto a = enc.encode(wave.data(), static_cast<int64_t>(wave.size()));
  auto b = encoder().encode(wave.data(), static_cast<int64_t>(wave.size()));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->codes, b->codes);
}

TEST(SpeechEncoder, ShortSignalsGiveCeilFrames) {
  const GoldenFile g = golden("speech_encoder");
  const auto wave = g.f32("wave_3s");
  for (int64_t n : {1, 1919, 1920, 1921, 3840}) {
    auto r = encoder().encode(wave.data(), n);
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_EQ(r->frames, (n + 1919) / 1920) << n;
    EXPECT_EQ(r->codes.size(), static_cast<size_t>(r->frames * 16));
    for (int32_t c : r->codes) EXPECT_TRUE(c >= 0 && c < 2048);
  }
}

TEST(SpeechEncoder, BadInputIsAnError) {
  std::vector<float> w(4000, 0.1f);
  EXPECT_EQ(encoder().encode(w.data(), 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(encoder().encode(nullptr, 10).error().code, ErrorCode::kInvalidArgument);
  w[1234] = std::nanf("");
  auto r = encoder().encode(w.data(), static_cast<int64_t>(w.size()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("1234"), std::string::npos);
  w[1234] = INFINITY;
  EXPECT_FALSE(encoder().encode(w.data(), static_cast<int64_t>(w.size())).ok());
  EXPECT_EQ(encoder().encode(w.data(), SpeechEncoder::kMaxSamples + 1).error().code, ErrorCode::kResourceExhausted);
}

TEST(SpeechEncoder, MissingOrMisshapedWeightsAreErrors) {
  const auto& f = tiny_base_files();
  codec::CodecConfig c = f.config.codec;
  c.encoder.hidden_size = 48;  // the checkpoint's tensors are 32 wide
  auto r = SpeechEncoder::load(f.codec, c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kShapeMismatch);
  c = f.config.codec;
  c.encoder.present = false;
  EXPECT_EQ(SpeechEncoder::load(f.codec, c).error().code, ErrorCode::kNotFound);
  c = f.config.codec;
  c.samples_per_frame = 960;  // strides would not give 12.5 Hz
  EXPECT_FALSE(SpeechEncoder::load(f.codec, c).ok());
  c = f.config.codec;
  c.encoder_valid_num_quantizers = 1;  // must keep at least one acoustic codebook
  EXPECT_FALSE(SpeechEncoder::load(f.codec, c).ok());
  // A codec without encoder weights (the decoder-only folders other models ship).
  EXPECT_FALSE(codec::load_speech_encoder(scratch_dir("no_codec")).ok());
}

}  // namespace
}  // namespace chorus::test
