// The GPU codec decoder (models/codec/decoder_cuda.h) against the CPU decoder, the reference
// (itself checked against the official goldens in tests/codec): the tiny reference codec, a small
// 8-layer codec with grouped-query attention, and a real-size random codec. Every case decodes
// more than 72 frames (the attention window slides) in chunks of 1, 3 and 7 frames and compares
// each with one CPU pass; a bad code must leave the GPU state untouched.
#include <cstdio>

#include "gpu_codec_util.h"
#include "gpu_test_util.h"
#include "models/codec/decoder.h"
#include "models/codec/decoder_cuda.h"

namespace chorus::gpu_test {
namespace {

using codec::CudaDecoder;
using codec::Decoder;

// Decodes `codes` on the GPU in chunks of `chunk` frames (GPU internal block `block`).
std::vector<float> gpu_decode(const CudaDecoder& dec, const std::vector<int32_t>& codes, int64_t frames,
                              int64_t chunk, int64_t block) {
  auto st = dec.new_state(block);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  std::vector<float> out;
  if (!st.ok()) return out;
  const int64_t Q = dec.num_quantizers();
  for (int64_t f = 0; f < frames; f += chunk) {
    const int64_t n = std::min(chunk, frames - f);
    auto s = dec.decode(*st, codes.data() + f * Q, n, out);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    if (!s.ok()) return out;
  }
  EXPECT_EQ(st->frames(), frames);
  EXPECT_TRUE(dec.flush(*st, out).ok());
  return out;
}

void check_codec(const Codec& c, int64_t frames, const char* what) {
  auto cpu = Decoder::load(c.ckpt, c.config);
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  auto gpu = CudaDecoder::load(c.ckpt, c.config);
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  const auto codes = random_codes(frames, c.config, 7);
  auto ref = cpu->decode_all(codes.data(), frames);
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  ASSERT_EQ(ref->size(), static_cast<size_t>(frames * c.config.samples_per_frame));
  expect_meaningful(*ref, what);
  // (chunk, internal block): blocks smaller and larger than the chunks. Every kernel computes a
  // column the same way whatever the step's size (decoder_cuda.h), so all chunkings agree bit for bit.
  std::vector<float> first;
  for (auto [chunk, block] : {std::pair<int64_t, int64_t>{1, 8}, {3, 2}, {7, 4}, {7, 16}, {frames, 8}}) {
    const std::vector<float> got = gpu_decode(*gpu, codes, frames, chunk, block);
    const double d = max_abs_diff(got, *ref);
    std::printf("[ codec ] %s: %lld frames, chunks of %lld (block %lld): max |gpu - cpu| = %.3g\n", what,
                static_cast<long long>(frames), static_cast<long long>(chunk), static_cast<long long>(block), d);
    EXPECT_LE(d, kMaxAbs) << what << " chunk " << chunk << " block " << block;
    if (first.empty()) first = got;
    else EXPECT_TRUE(got == first) << what << " chunk " << chunk << " block " << block << ": not bit-identical to chunks of 1";
  }
}

TEST(GpuCodec, TinyReferenceCodecStreamsLikeTheCpu) {
  REQUIRE_GPU();
  const std::string dir = test::reference_path("qwen3_tts/models/tiny_custom_voice/speech_tokenizer");
  auto cfg = codec::load_codec_config(dir + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.error().to_string();
  auto ck = io::Checkpoint::open_dir(dir, "model");
  ASSERT_TRUE(ck.ok()) << ck.error().to_string();
  check_codec(Codec{*cfg, std::move(ck).value()}, 100, "tiny reference codec");
}

TEST(GpuCodec, EightLayerGqaCodecStreamsLikeTheCpu) {
  REQUIRE_GPU();
  check_codec(random_codec(small_gqa_config(), 3, "gqa"), 160, "8-layer GQA codec");
}

TEST(GpuCodec, RealSizeCodecStreamsLikeTheCpu) {
  REQUIRE_GPU();
  check_codec(random_codec(real_config(), 5, "real"), 80, "real-size codec");
}

TEST(GpuCodec, BadCodeLeavesTheStateUntouched) {
  REQUIRE_GPU();
  const Codec c = random_codec(small_gqa_config(), 4, "bad_code");
  auto gpu = CudaDecoder::load(c.ckpt, c.config);
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  const int64_t Q = c.config.decoder.num_quantizers, frames = 20;
  const auto codes = random_codes(frames, c.config, 9);
  const std::vector<float> want = gpu_decode(*gpu, codes, frames, frames, 8);

  auto st = gpu->new_state(4);
  ASSERT_TRUE(st.ok());
  std::vector<float> out;
  ASSERT_TRUE(gpu->decode(*st, codes.data(), 10, out).ok());
  std::vector<int32_t> bad(codes.begin() + 10 * Q, codes.end());
  bad[5 * Q + 3] = static_cast<int32_t>(c.config.decoder.codebook_size);  // frame 15, codebook 3
  const size_t before = out.size();
  auto s = gpu->decode(*st, bad.data(), 10, out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(out.size(), before);
  EXPECT_EQ(st->frames(), 10);
  bad[5 * Q + 3] = -1;
  EXPECT_FALSE(gpu->decode(*st, bad.data(), 10, out).ok());
  // The stream continues as if the bad calls never happened.
  ASSERT_TRUE(gpu->decode(*st, codes.data() + 10 * Q, 10, out).ok());
  const double d = max_abs_diff(out, want);
  std::printf("[ codec ] after rejected codes: max |diff| vs an undisturbed stream = %.3g\n", d);
  EXPECT_LE(d, kMaxAbs);

  // reset() makes a used state a fresh stream again.
  ASSERT_TRUE(gpu->reset(*st).ok());
  out.clear();
  ASSERT_TRUE(gpu->decode(*st, codes.data(), frames, out).ok());
  EXPECT_LE(max_abs_diff(out, want), kMaxAbs);
  ASSERT_TRUE(gpu->flush(*st, out).ok());
  EXPECT_FALSE(gpu->decode(*st, codes.data(), 1, out).ok());  // flushed
}

// Streams share the decoder's scratch, CUDA stream and cuBLAS handle and keep only their
// histories: decoding several streams interleaved, frame by frame, must give each one exactly what
// it gives alone (a history left in the shared scratch, or another stream's, would show here).
TEST(GpuCodec, InterleavedStreamsEqualTheirSoloDecodes) {
  REQUIRE_GPU();
  const Codec c = random_codec(small_gqa_config(), 6, "interleaved");
  auto gpu = CudaDecoder::load(c.ckpt, c.config);
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  const int64_t Q = c.config.decoder.num_quantizers, frames = 90;
  constexpr int kStreams = 3;
  std::vector<std::vector<int32_t>> codes;
  std::vector<std::vector<float>> solo, got(kStreams);
  std::vector<codec::CudaDecoderState> states;
  for (int i = 0; i < kStreams; ++i) {
    codes.push_back(random_codes(frames, c.config, 20 + static_cast<uint64_t>(i)));
    solo.push_back(gpu_decode(*gpu, codes.back(), frames, 1, 8));  // the same calls, alone
    auto st = gpu->new_state(8);
    ASSERT_TRUE(st.ok());
    states.push_back(std::move(*st));
  }
  EXPECT_NE(solo[0], solo[1]);
  for (int64_t f = 0; f < frames; ++f)
    for (int i = 0; i < kStreams; ++i)
      ASSERT_TRUE(gpu->decode(states[static_cast<size_t>(i)], codes[static_cast<size_t>(i)].data() + f * Q, 1,
                              got[static_cast<size_t>(i)]).ok());
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], solo[static_cast<size_t>(i)]) << "stream " << i;
  // A stream's own device state is its histories alone.
  const size_t per_stream = gpu->state_bytes(8);
  std::printf("[ codec ] per-stream device state %.2f MiB\n", static_cast<double>(per_stream) / (1 << 20));
  EXPECT_GT(per_stream, 0u);
}

}  // namespace
}  // namespace chorus::gpu_test
