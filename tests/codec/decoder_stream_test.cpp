// Streaming decode == one full decode, bitwise, for any split of the frames and any length; the
// official chunked mode streamed == the official chunked decode built from independent full
// decodes. An 8-layer random codec makes the sliding windows stack as deep as in the real decoder
// (8 × 71 frames), and sequences run past that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "codec_test_util.h"
#include "models/codec/codec_folder.h"
#include "runtime/cpu/kernels.h"
#include "runtime/kernel_test_util.h"

namespace chorus::codec::test {
namespace {

constexpr int64_t kFrames = 720;  // > 8 × 71 = 568 and > 2 × 300 (two official chunk boundaries)

std::vector<float> stream(const Decoder& dec, const std::vector<int32_t>& codes, int64_t frames,
                          int64_t chunk, DecodeMode mode = DecodeMode::kExact) {
  const int64_t Q = dec.num_quantizers();
  DecoderState s = dec.new_state(mode);
  std::vector<float> out;
  for (int64_t f = 0; f < frames; f += chunk) {
    const int64_t n = std::min(chunk, frames - f);
    const size_t before = out.size();
    auto st = dec.decode(s, codes.data() + f * Q, n, out);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    // Nothing is held back: every frame's samples come out with the call that decodes it.
    EXPECT_EQ(out.size() - before, static_cast<size_t>(n * dec.samples_per_frame()));
  }
  EXPECT_TRUE(dec.flush(s, out).ok());
  EXPECT_EQ(out.size(), static_cast<size_t>(frames * dec.samples_per_frame()));
  return out;
}

// Audio that is neither silent nor saturated, with differing frames: a comparison on it means
// something.
void expect_nontrivial(const std::vector<float>& wav) {
  ASSERT_FALSE(wav.empty());
  double ss = 0;
  size_t clipped = 0;
  for (float v : wav) {
    ASSERT_TRUE(std::isfinite(v));
    ss += double(v) * v;
    clipped += std::fabs(v) >= 1.0f;
  }
  const double rms = std::sqrt(ss / wav.size());
  std::printf("  audio rms %.3f, %.2f%% clipped\n", rms, 100.0 * clipped / wav.size());
  EXPECT_GT(rms, 1e-2);
  EXPECT_LT(clipped, wav.size() / 20);
}

using StreamTest = cpu::test::IsaTest;

TEST_P(StreamTest, EightLayerCodecAnySplitEqualsFullDecodeBitwise) {
  static const RandomCodec rc = make_random_codec(small_eight_layer_config(), 42, "stream8");
  auto dec = Decoder::load(rc.ckpt, rc.config);
  ASSERT_TRUE(dec.ok()) << dec.error().to_string();
  const auto codes = random_codes(kFrames, 16, rc.config.decoder.codebook_size, 5);

  // Reference: one call with every frame in one internal step (one pass over the whole sequence).
  Decoder one_pass = *dec;
  ASSERT_TRUE(one_pass.set_block_frames(kFrames).ok());
  auto full = one_pass.decode_all(codes.data(), kFrames);
  ASSERT_TRUE(full.ok());
  expect_nontrivial(*full);

  for (int64_t chunk : {1, 2, 7, 300}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    EXPECT_TRUE(bitwise_equal(stream(*dec, codes, kFrames, chunk), *full));
  }
  // The internal step size does not matter either.
  Decoder small_steps = *dec;
  ASSERT_TRUE(small_steps.set_block_frames(3).ok());
  EXPECT_TRUE(bitwise_equal(stream(small_steps, codes, kFrames, 50), *full));
}

TEST_P(StreamTest, EightLayerCodecHistoryReachesBackFarther) {
  // Guard against a vacuous "equal" above: changing only frame 0 must still change audio after
  // frame 500 (the windows stack over 8 layers), so a cache that forgot old frames would show.
  static const RandomCodec rc = make_random_codec(small_eight_layer_config(), 42, "stream8b");
  auto dec = Decoder::load(rc.ckpt, rc.config);
  ASSERT_TRUE(dec.ok());
  auto codes = random_codes(600, 16, rc.config.decoder.codebook_size, 5);
  auto a = dec->decode_all(codes.data(), 600);
  codes[0] = (codes[0] + 1) % rc.config.decoder.codebook_size;
  auto b = dec->decode_all(codes.data(), 600);
  ASSERT_TRUE(a.ok() && b.ok());
  double late = 0;
  for (size_t i = 500 * 1920; i < a->size(); ++i) late = std::max(late, double(std::fabs((*a)[i] - (*b)[i])));
  EXPECT_GT(late, 0.0);
}

TEST_P(StreamTest, OfficialChunkedStreamEqualsIndependentChunkDecodes) {
  static const RandomCodec rc = make_random_codec(small_eight_layer_config(), 43, "official8");
  auto dec = Decoder::load(rc.ckpt, rc.config);
  ASSERT_TRUE(dec.ok());
  const auto codes = random_codes(kFrames, 16, rc.config.decoder.codebook_size, 6);
  const int64_t Q = 16, spf = 1920;
  // The official recipe: chunks [s, s+300) decoded from s − ctx, ctx = 25 (0 for the first chunk),
  // the first ctx frames of audio dropped.
  std::vector<float> want;
  for (int64_t s = 0; s < kFrames; s += 300) {
    const int64_t ctx = s - 25 > 0 ? 25 : s, end = std::min(s + 300, kFrames);
    auto part = dec->decode_all(codes.data() + (s - ctx) * Q, end - (s - ctx));
    ASSERT_TRUE(part.ok());
    want.insert(want.end(), part->begin() + ctx * spf, part->end());
  }
  for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{300}, kFrames}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    EXPECT_TRUE(bitwise_equal(stream(*dec, codes, kFrames, chunk, DecodeMode::kOfficialChunked), want));
  }
  // And it is a different decode from the exact one after frame 300.
  auto exact = dec->decode_all(codes.data(), kFrames);
  ASSERT_TRUE(exact.ok());
  EXPECT_FALSE(bitwise_equal(*exact, want));
  EXPECT_TRUE(std::equal(exact->begin(), exact->begin() + 300 * spf, want.begin()));
}

TEST_P(StreamTest, TinyReferenceCodecStreamsExactly) {
  auto m = load_codec(tiny_codec_dir());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  constexpr int64_t kTinyFrames = 160;  // > 2 layers × 71 frames of stacked windows
  const auto codes = random_codes(kTinyFrames, 16, 2048, 9);
  auto full = m->decoder.decode_all(codes.data(), kTinyFrames);
  ASSERT_TRUE(full.ok());
  expect_nontrivial(*full);
  for (int64_t chunk : {1, 5, 73}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    EXPECT_TRUE(bitwise_equal(stream(m->decoder, codes, kTinyFrames, chunk), *full));
  }
}

TEST_P(StreamTest, ThreadCountDoesNotChangeSamples) {
  auto m = load_codec(tiny_codec_dir());
  ASSERT_TRUE(m.ok());
  const auto codes = random_codes(40, 16, 2048, 10);
  auto pooled = m->decoder.decode_all(codes.data(), 40);
  Decoder single = m->decoder;
  single.set_thread_pool(nullptr);
  auto inline_run = single.decode_all(codes.data(), 40);
  ASSERT_TRUE(pooled.ok() && inline_run.ok());
  EXPECT_TRUE(bitwise_equal(*pooled, *inline_run));
}

CHORUS_INSTANTIATE_ISA(StreamTest);

}  // namespace
}  // namespace chorus::codec::test
