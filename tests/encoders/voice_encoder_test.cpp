// VoiceEncoder: reference audio files through the audio reader into both encoders. A float WAV of
// the test wave must give exactly what the samples give; other rates, channel counts and formats
// must give a valid voice; bad files and models are errors.
#include <gtest/gtest.h>

#include "audio/writer.h"
#include "encoder_test_util.h"
#include "models/qwen3_tts/voice_check.h"
#include "models/qwen3_tts/voice_encoder.h"

namespace chorus::test {
namespace {

using qwen3_tts::VoiceEncoder;

const VoiceEncoder& encoder() {
  static const VoiceEncoder enc = [] {
    auto e = VoiceEncoder::from_files(tiny_base_files(), nullptr);
    if (!e.ok()) {
      ADD_FAILURE() << e.error().to_string();
      std::abort();
    }
    return std::move(e).value();
  }();
  return enc;
}

std::string write_audio(const std::string& name, const std::vector<float>& samples, audio::WriterOptions o) {
  const std::string path = scratch_dir("voice_enc") + "/" + name;
  auto w = audio::AudioWriter::open(path, o);
  EXPECT_TRUE(w.ok()) << w.error().to_string();
  if (!w.ok()) return path;
  EXPECT_TRUE((*w)->write(samples.data(), samples.size()).ok());
  EXPECT_TRUE((*w)->close().ok());
  return path;
}

TEST(VoiceEncoder, FloatWavGivesExactlyWhatTheSamplesGive) {
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  audio::WriterOptions o;
  o.sample_format = audio::SampleFormat::kFloat32;
  const std::string path = write_audio("ref.wav", wave, o);
  auto from_file = encoder().encode_file(path, true);
  ASSERT_TRUE(from_file.ok()) << from_file.error().to_string();
  auto direct = encoder().encode(wave.data(), static_cast<int64_t>(wave.size()), true);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(from_file->x_vector, direct->x_vector);
  EXPECT_EQ(from_file->ref_codes, direct->ref_codes);
  EXPECT_EQ(from_file->frames, 38);
  EXPECT_EQ(from_file->codebooks, 16);
  EXPECT_DOUBLE_EQ(from_file->ref_seconds, 3.0);
  EXPECT_TRUE(qwen3_tts::check_voice_for_model(*from_file, tiny_base_files().config, path).ok());
}

TEST(VoiceEncoder, OtherRatesAndFormatsGiveAValidVoice) {
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  audio::WriterOptions o;
  o.output_rate = 44100;  // resampled on write, and back to 24 kHz on read
  for (const char* name : {"ref44k.flac", "ref44k.wav"}) {
    SCOPED_TRACE(name);
    auto v = encoder().encode_file(write_audio(name, wave, o), true);
    ASSERT_TRUE(v.ok()) << v.error().to_string();
    EXPECT_EQ(v->frames, 38);  // 3 s whatever the file's rate
    // A 16-bit, twice-resampled copy is still the same voice.
    auto ref = encoder().encode(wave.data(), static_cast<int64_t>(wave.size()), false);
    ASSERT_TRUE(ref.ok());
    EXPECT_GT(cosine(v->x_vector, ref->x_vector), 0.99);
  }
  // x-vector only: no codes.
  auto x = encoder().encode(wave.data(), 24000, false);
  ASSERT_TRUE(x.ok());
  EXPECT_FALSE(x->has_codes());
  EXPECT_TRUE(voice::check_voice(*x, "x").ok());
}

TEST(VoiceEncoder, BadInputsAreErrors) {
  const auto wave = golden("speaker_encoder").f32("wave_3s");
  auto missing = encoder().encode_file(scratch_dir("voice_enc_missing") + "/none.wav", true);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  const std::string short_path = write_audio("short.wav", std::vector<float>(wave.begin(), wave.begin() + 2400), {});
  auto too_short = encoder().encode_file(short_path, true);  // 0.1 s < the default 0.5 s minimum
  ASSERT_FALSE(too_short.ok());
  EXPECT_NE(too_short.error().message.find("short.wav"), std::string::npos);
  audio::AudioLimits limits;
  limits.max_seconds = 2.0;
  EXPECT_FALSE(encoder().encode_file(write_audio("long.wav", wave, {}), true, limits).ok());
  limits = {};
  limits.min_seconds = 0;  // below the speaker encoder's own 1280-sample minimum
  auto tiny = encoder().encode_file(write_audio("tiny.wav", std::vector<float>(wave.begin(), wave.begin() + 1000), {}), true, limits);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.error().code, ErrorCode::kOutOfRange);
  EXPECT_FALSE(encoder().encode(wave.data(), 0, true).ok());

  auto cv = qwen3_tts::open_model_files(q3_path("models/tiny_custom_voice"));
  ASSERT_TRUE(cv.ok());
  auto e = VoiceEncoder::from_files(*cv, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace chorus::test
