// Breeze TTS 2 voice cloning from audio: reference audio → codes through the checkpoint's codec
// encoder (engine::BreezeEngine::encode_voice, the path `say --ref-audio` takes) must give the same
// request and the same prompt rows as the codes of the speech encoder run on its own, given as
// reference codes (`say --ref-codes`). Voice files made from it round-trip; unsuitable voices and
// hostile audio are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "audio/reader.h"
#include "audio/writer.h"
#include "breeze_test_util.h"
#include "engine/breeze_engine.h"
#include "models/breeze_tts/voice.h"
#include "models/codec/speech_encoder.h"

namespace chorus::breeze_tts {
namespace {

using engine::BreezeEngine;
using engine::SynthesisRequest;

const BreezeEngine& engine_under_test() {
  static const BreezeEngine* e = [] {
    auto r = BreezeEngine::load(test::tiny_model_dir(), &ThreadPool::global());
    if (!r.ok()) throw std::runtime_error(r.error().to_string());
    return r->release();
  }();
  return *e;
}

std::vector<float> test_wave() {
  auto f = io::SafetensorsFile::open(chorus::test::reference_path("qwen3_tts/goldens/speaker_encoder.safetensors"));
  if (!f.ok()) throw std::runtime_error(f.error().to_string());
  const Tensor t = f->tensor(*f->find("wave_3s")).to_f32();
  return {t.f32(), t.f32() + t.numel()};
}

// A mono float WAV at 24 kHz written byte by byte (so NaN and empty data can be planted).
std::string write_float_wav(const std::string& dir, const std::string& name, const std::vector<float>& samples) {
  const std::string path = dir + "/" + name;
  const auto header = audio::wav_header(24000, audio::SampleFormat::kFloat32,
                                        static_cast<uint32_t>(samples.size() * sizeof(float)));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(samples.data()), static_cast<std::streamsize>(samples.size() * sizeof(float)));
  return path;
}

SynthesisRequest base_request() {
  SynthesisRequest r;
  r.text_ids = {10, 11, 12, 13};
  r.ref_text_ids = {20, 21, 22};
  r.activations = engine::ActivationPrecision::kF32;
  return r;
}

// The clone prompt rows of a request, as the generation builds them.
Tensor clone_rows(const SynthesisRequest& r, Layout layout) {
  const BreezeEngine& e = engine_under_test();
  auto parts = e.prompt_parts(r);
  EXPECT_TRUE(parts.ok()) << parts.error().to_string();
  if (!parts.ok()) return {};
  static const BreezeModel* model = [] {
    auto m = BreezeModel::load(engine_under_test().files());
    if (!m.ok()) throw std::runtime_error(m.error().to_string());
    return new BreezeModel(std::move(*m));
  }();
  auto pl = build_layout(model->config, layout, *parts);
  EXPECT_TRUE(pl.ok()) << pl.error().to_string();
  if (!pl.ok()) return {};
  auto rows = prompt_rows(model->config, *pl, parts->ref, model->encoder, model->audio_table);
  EXPECT_TRUE(rows.ok()) << rows.error().to_string();
  return rows.ok() ? *rows : Tensor{};
}

// The codes of the speech encoder run on its own on the file's samples (the --ref-codes input).
std::vector<std::vector<int32_t>> direct_codes(const std::string& wav) {
  auto enc = codec::load_speech_encoder(test::tiny_model_dir());
  EXPECT_TRUE(enc.ok()) << enc.error().to_string();
  auto a = audio::read_audio(wav);
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  if (!enc.ok() || !a.ok()) return {};
  auto c = enc->encode(a->samples.data(), static_cast<int64_t>(a->samples.size()));
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  if (!c.ok()) return {};
  std::vector<std::vector<int32_t>> frames;
  for (int64_t t = 0; t < c->frames; ++t)
    frames.emplace_back(c->codes.begin() + t * c->codebooks, c->codes.begin() + (t + 1) * c->codebooks);
  return frames;
}

TEST(BreezeVoice, ReferenceAudioGivesTheSamePromptRowsAsItsCodes) {
  const std::string dir = chorus::test::scratch_dir("breeze_voice");
  const std::string wav = write_float_wav(dir, "ref.wav", test_wave());
  const auto frames = direct_codes(wav);
  ASSERT_EQ(frames.size(), 38u);  // ceil(72000 / 1920)
  // The codes must use more than one code, or the comparison would prove little.
  std::set<int32_t> distinct;
  for (const auto& f : frames) distinct.insert(f.begin(), f.end());
  EXPECT_GT(distinct.size(), 50u);

  const BreezeEngine& e = engine_under_test();
  auto voice = e.encode_voice(wav, {});
  ASSERT_TRUE(voice.ok()) << voice.error().to_string();
  EXPECT_EQ(voice->model_family, "breeze-tts");
  EXPECT_TRUE(voice->x_vector.empty());
  EXPECT_EQ(voice->codec, codec_signature(e.files().config.codec));
  SynthesisRequest from_audio = base_request();
  ASSERT_TRUE(e.apply_voice(*voice, wav, from_audio).ok());
  SynthesisRequest from_codes = base_request();
  from_codes.ref_codes = frames;
  EXPECT_EQ(from_audio.ref_codes, from_codes.ref_codes);

  for (const Layout layout : {Layout::kClone, Layout::kDirection}) {
    from_audio.instruct_ids = from_codes.instruct_ids = layout == Layout::kDirection ? std::vector<int32_t>{30, 31}
                                                                                     : std::vector<int32_t>{};
    const Tensor a = clone_rows(from_audio, layout), b = clone_rows(from_codes, layout);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.dim(0), 1 + 1 + 3 + 38 + 1 + 1 + 1 + 4 + (layout == Layout::kDirection ? 4 : 0));
    EXPECT_EQ(std::memcmp(a.f32(), b.f32(), sizeof(float) * static_cast<size_t>(a.numel())), 0) << layout_name(layout);
  }
}

TEST(BreezeVoice, VoiceFileRoundTripFillsCodesAndTranscript) {
  const std::string dir = chorus::test::scratch_dir("breeze_voice");
  const std::string wav = write_float_wav(dir, "ref_file.wav", test_wave());
  const BreezeEngine& e = engine_under_test();
  auto voice = e.encode_voice(wav, {});
  ASSERT_TRUE(voice.ok()) << voice.error().to_string();
  voice->ref_text_ids = {20, 21, 22};
  const std::string path = dir + "/v.voice";
  ASSERT_TRUE(voice::write_voice_file(path, *voice).ok());
  auto back = voice::read_voice_file(path);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->ref_codes, voice->ref_codes);
  EXPECT_EQ(back->codec, voice->codec);

  SynthesisRequest r;
  r.text_ids = {10, 11};
  ASSERT_TRUE(e.apply_voice(*back, path, r).ok());
  EXPECT_EQ(r.ref_text_ids, (std::vector<int32_t>{20, 21, 22}));
  EXPECT_EQ(r.ref_codes, direct_codes(wav));
  // A transcript in both places is ambiguous.
  SynthesisRequest twice = base_request();
  EXPECT_FALSE(e.apply_voice(*back, path, twice).ok());
}

TEST(BreezeVoice, UnsuitableVoicesAreClearErrors) {
  const BreezeEngine& e = engine_under_test();
  const Config& c = e.files().config;
  voice::Voice good;
  good.model_family = voice::kVoiceFamilyBreeze;
  good.codebooks = c.num_codebooks;
  good.frames = 2;
  good.ref_codes.assign(static_cast<size_t>(2 * c.num_codebooks), 7);
  good.codec = codec_signature(c.codec);
  SynthesisRequest r = base_request();
  ASSERT_TRUE(e.apply_voice(good, "good", r).ok());

  auto expect_error = [&](const voice::Voice& v, ErrorCode code, const char* words) {
    SynthesisRequest q = base_request();
    const Status st = e.apply_voice(v, "v.voice", q);
    ASSERT_FALSE(st.ok()) << words;
    EXPECT_EQ(st.error().code, code) << st.error().to_string();
    EXPECT_NE(st.error().message.find(words), std::string::npos) << st.error().message;
  };
  voice::Voice qwen = good;
  qwen.model_family = voice::kVoiceFamilyQwen3;
  qwen.x_vector.assign(64, 0.5f);
  expect_error(qwen, ErrorCode::kUnsupported, "qwen3-tts");
  voice::Voice other_codec = good;
  other_codec.codec = "12hz-16000-1280-8x1024";
  expect_error(other_codec, ErrorCode::kUnsupported, "codec");
  voice::Voice fewer = good;
  fewer.codebooks = 8;
  expect_error(fewer, ErrorCode::kShapeMismatch, "codebooks");
  voice::Voice reserved = good;
  reserved.ref_codes[5] = static_cast<int32_t>(c.codec_codebook_size);
  expect_error(reserved, ErrorCode::kOutOfRange, "outside the codebook");
  SynthesisRequest no_text;
  no_text.text_ids = {10};
  EXPECT_FALSE(e.apply_voice(good, "good", no_text).ok());
}

TEST(BreezeVoice, HostileAudioIsAnError) {
  const BreezeEngine& e = engine_under_test();
  const auto wave = test_wave();
  const std::string dir = chorus::test::scratch_dir("breeze_voice");  // once: each call empties the folder
  auto expect_error = [&](const std::string& path, const audio::AudioLimits& limits, const char* what) {
    auto v = e.encode_voice(path, limits);
    EXPECT_FALSE(v.ok()) << what;
    if (!v.ok()) {
      EXPECT_NE(v.error().message.find(path), std::string::npos) << v.error().message;
    }
  };
  audio::AudioLimits any;
  any.min_seconds = 0;
  expect_error(write_float_wav(dir, "empty.wav", {}), any, "empty");
  audio::AudioLimits two_seconds;
  two_seconds.max_seconds = 2.0;
  expect_error(write_float_wav(dir, "long.wav", wave), two_seconds, "too long");
  std::vector<float> nan_wave = wave;
  nan_wave[1234] = NAN;
  expect_error(write_float_wav(dir, "nan.wav", nan_wave), {}, "NaN");
  std::vector<float> inf_wave = wave;
  inf_wave[10] = INFINITY;
  expect_error(write_float_wav(dir, "inf.wav", inf_wave), {}, "inf");
  expect_error(dir + "/missing.wav", {}, "missing");
  std::ofstream(dir + "/garbage.wav") << "RIFF? not audio at all";
  expect_error(dir + "/garbage.wav", {}, "garbage");
}

}  // namespace
}  // namespace chorus::breeze_tts
