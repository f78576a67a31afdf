// Malformed, forged and out-of-limit audio input: each case must give its own error code and a
// message naming the input, never a crash, hang or huge allocation (this binary also runs under
// ASan/UBSan).
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "audio/reader.h"
#include "audio/writer.h"
#include "audio_test_util.h"
#include "support/test_support.h"

namespace chorus::audio {
namespace {

using testutil::f32_payload;
using testutil::make_wav;
using testutil::pcm16_payload;
using testutil::sine;
using testutil::WavSpec;

ReadOptions lenient() {
  ReadOptions o;
  o.target_rate = 0;
  o.limits.min_seconds = 0;
  return o;
}

// The error must carry `code`, name the input and say `what`.
void expect_error(const Result<Audio>& r, ErrorCode code, const std::string& label, const std::string& what) {
  ASSERT_FALSE(r.ok()) << "accepted; expected: " << what;
  EXPECT_EQ(r.error().code, code) << r.error().to_string();
  EXPECT_NE(r.error().message.find(label), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
}

const std::vector<float> kOneSecond = sine(16000, 16000, 300.0, 0.5);

TEST(AudioBadInput, ControlValidWavDecodes) {
  // The hand-built WAV the other cases corrupt is itself fine.
  auto a = decode_audio(make_wav({}, pcm16_payload(kOneSecond)), "ok.wav", lenient());
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->samples.size(), kOneSecond.size());
}

TEST(AudioBadInput, EmptyBytes) { expect_error(decode_audio("", "req", lenient()), ErrorCode::kInvalidFormat, "req", "empty"); }

TEST(AudioBadInput, GarbageBytes) {
  std::mt19937 rng(1);
  std::string junk(3000, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  expect_error(decode_audio(junk, "junk.bin", lenient()), ErrorCode::kInvalidFormat, "junk.bin", "not a recognised audio file");
}

TEST(AudioBadInput, TruncatedHeader) {
  const std::string wav = make_wav({}, pcm16_payload(kOneSecond));
  expect_error(decode_audio(wav.substr(0, 30), "cut.wav", lenient()), ErrorCode::kInvalidFormat, "cut.wav", "");
}

TEST(AudioBadInput, ZeroChannels) {
  WavSpec w;
  w.channels = 0;
  expect_error(decode_audio(make_wav(w, pcm16_payload(kOneSecond)), "c0.wav", lenient()), ErrorCode::kInvalidFormat,
               "c0.wav", "");
}

TEST(AudioBadInput, TooManyChannels) {
  WavSpec w;
  w.channels = 40;  // valid for libsndfile, above our limit of 16
  const std::string payload(40 * 2 * 1000, '\0');
  expect_error(decode_audio(make_wav(w, payload), "c40.wav", lenient()), ErrorCode::kOutOfRange, "c40.wav", "40 channels");
}

TEST(AudioBadInput, AbsurdSampleRates) {
  for (uint32_t rate : {0u, 1u, 100u, 1000000u, 0xFFFFFFFFu}) {
    WavSpec w;
    w.sample_rate = rate;
    auto r = decode_audio(make_wav(w, pcm16_payload(kOneSecond)), "rate.wav", lenient());
    ASSERT_FALSE(r.ok()) << rate;
    // libsndfile rejects some of these itself (invalid format), the rest hit our range check.
    EXPECT_TRUE(r.error().code == ErrorCode::kOutOfRange || r.error().code == ErrorCode::kInvalidFormat)
        << rate << ": " << r.error().to_string();
    EXPECT_NE(r.error().message.find("rate.wav"), std::string::npos);
  }
}

TEST(AudioBadInput, NoSamples) {
  expect_error(decode_audio(make_wav({}, ""), "empty.wav", lenient()), ErrorCode::kInvalidFormat, "empty.wav",
               "no audio samples");
}

TEST(AudioBadInput, NonFiniteFloatSamples) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> x = kOneSecond;
    x[1234] = bad;
    WavSpec w;
    w.format_tag = 3;
    w.bits = 32;
    expect_error(decode_audio(make_wav(w, f32_payload(x)), "nan.wav", lenient()), ErrorCode::kInvalidFormat, "nan.wav",
                 "non-finite sample at frame 1234");
  }
}

TEST(AudioBadInput, AbsurdFloatSamples) {
  std::vector<float> x = kOneSecond;
  x[77] = 3e30f;
  WavSpec w;
  w.format_tag = 3;
  w.bits = 32;
  expect_error(decode_audio(make_wav(w, f32_payload(x)), "huge.wav", lenient()), ErrorCode::kInvalidFormat, "huge.wav",
               "absurd sample value at frame 77");
}

TEST(AudioBadInput, DataSizeLargerThanFileIsClampedNotTrusted) {
  // A forged data size of ~4 GB on a 1 s file: libsndfile clamps to the bytes present; nothing
  // allocates for the declared size.
  WavSpec w;
  w.declared_data_bytes = 0xFFFFFFF0;
  w.declared_riff_bytes = 0xFFFFFFFF;
  auto a = decode_audio(make_wav(w, pcm16_payload(kOneSecond)), "forged.wav", lenient());
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->samples.size(), kOneSecond.size());
}

TEST(AudioBadInput, ForgedFlacLengthIsRejectedBeforeAllocating) {
  // FLAC's STREAMINFO carries a 36-bit total sample count that libsndfile reports as the length;
  // forging it to 2^35 frames (~24 days at 16 kHz) must hit the length check, not a 128 GB
  // reserve.
  const std::string path = test::scratch_dir("audio_forged_flac") + "/a.flac";
  {
    WriterOptions wo;
    wo.input_rate = 16000;
    auto w = AudioWriter::open(path, wo);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(kOneSecond.data(), kOneSecond.size()).ok());
    ASSERT_TRUE((*w)->close().ok());
  }
  std::string flac = testutil::read_bytes(path);
  // "fLaC", metadata block header (4 bytes), STREAMINFO: min/max block (4), min/max frame (6),
  // then 20 bits rate, 3 channels-1, 5 bps-1, 36 bits total samples (bytes 8+13 .. 8+17).
  ASSERT_EQ(flac.substr(0, 4), "fLaC");
  const size_t si = 8;
  uint64_t packed = 0;
  for (int i = 0; i < 8; ++i) packed = packed << 8 | static_cast<uint8_t>(flac[si + 10 + i]);
  ASSERT_EQ(packed & ((1ull << 36) - 1), kOneSecond.size());  // we found the right field
  packed = (packed & ~((1ull << 36) - 1)) | (1ull << 35);
  for (int i = 7; i >= 0; --i, packed >>= 8) flac[si + 10 + i] = static_cast<char>(packed & 0xff);
  expect_error(decode_audio(flac, "forged.flac", {}), ErrorCode::kResourceExhausted, "forged.flac", "the limit is 60 s");
}

TEST(AudioBadInput, TooLong) {
  ReadOptions o = lenient();
  o.limits.max_seconds = 0.5;
  expect_error(decode_audio(make_wav({}, pcm16_payload(kOneSecond)), "long.wav", o), ErrorCode::kResourceExhausted,
               "long.wav", "the limit is 0.5 s");
}

TEST(AudioBadInput, TooShort) {
  const std::vector<float> x(1600, 0.1f);  // 0.1 s
  expect_error(decode_audio(make_wav({}, pcm16_payload(x)), "short.wav", {}), ErrorCode::kOutOfRange, "short.wav",
               "the minimum is 0.5 s");
}

TEST(AudioBadInput, AudioThatResamplesToNothingIsAnError) {
  // Found by fuzz_audio_reader: one stereo frame at 66561 Hz rounds to zero samples at 16 kHz.
  WavSpec spec;
  spec.sample_rate = 66561;
  spec.channels = 2;
  ReadOptions o = lenient();
  o.limits.min_seconds = 0;
  o.target_rate = 16000;
  expect_error(decode_audio(make_wav(spec, pcm16_payload({0.1f, 0.2f})), "tiny.wav", o), ErrorCode::kInvalidFormat,
               "tiny.wav", "no samples remain at 16000 Hz");
}

TEST(AudioBadInput, TooManyBytes) {
  ReadOptions o = lenient();
  o.limits.max_file_bytes = 1000;
  expect_error(decode_audio(make_wav({}, pcm16_payload(kOneSecond)), "big.wav", o), ErrorCode::kResourceExhausted,
               "big.wav", "bytes, the limit is 1000");
}

TEST(AudioBadInput, SilenceWhenAsked) {
  ReadOptions o = lenient();
  o.limits.silence_peak = 1e-4f;
  const std::vector<float> x(16000, 0.0f);
  expect_error(decode_audio(make_wav({}, pcm16_payload(x)), "quiet.wav", o), ErrorCode::kInvalidArgument, "quiet.wav",
               "silent");
  EXPECT_TRUE(decode_audio(make_wav({}, pcm16_payload(x)), "quiet.wav", lenient()).ok());  // off by default
}

TEST(AudioBadInput, UnsupportedEncoding) {
  WavSpec w;
  w.format_tag = 0x1234;  // no such WAV codec
  auto r = decode_audio(make_wav(w, pcm16_payload(kOneSecond)), "odd.wav", lenient());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().code == ErrorCode::kUnsupported || r.error().code == ErrorCode::kInvalidFormat)
      << r.error().to_string();
}

TEST(AudioBadInput, Paths) {
  expect_error(read_audio("/nonexistent/x.wav"), ErrorCode::kNotFound, "/nonexistent/x.wav", "not found");
  const std::string dir = test::scratch_dir("audio_paths");
  expect_error(read_audio(dir), ErrorCode::kInvalidArgument, dir, "not a regular file");
  testutil::write_bytes(dir + "/zero.wav", "");
  expect_error(read_audio(dir + "/zero.wav"), ErrorCode::kInvalidFormat, "zero.wav", "empty");
  testutil::write_bytes(dir + "/text.wav", "this is not audio at all, just some text in a file named .wav\n");
  expect_error(read_audio(dir + "/text.wav"), ErrorCode::kInvalidFormat, "text.wav", "not a recognised audio file");
}

TEST(AudioBadInput, InconsistentOptions) {
  const std::string wav = make_wav({}, pcm16_payload(kOneSecond));
  ReadOptions o;
  o.target_rate = 5;
  EXPECT_EQ(decode_audio(wav, "x", o).error().code, ErrorCode::kInvalidArgument);
  o = {};
  o.limits.max_seconds = -1;
  EXPECT_EQ(decode_audio(wav, "x", o).error().code, ErrorCode::kInvalidArgument);
  o = {};
  o.limits.min_seconds = 10;
  o.limits.max_seconds = 5;
  EXPECT_EQ(decode_audio(wav, "x", o).error().code, ErrorCode::kInvalidArgument);
}

TEST(AudioBadInput, FormatAllowList) {
  const std::string dir = test::scratch_dir("audio_allow");
  const std::vector<float> x = sine(16000, 16000, 300.0, 0.5);
  // An Ogg Vorbis and an AIFF file made by libsndfile, a FLAC and a WAV by us.
  const auto sndfile_write = [&](const std::string& path, int format) {
    SF_INFO info{};
    info.channels = 1;
    info.samplerate = 16000;
    info.format = format;
    SNDFILE* sf = sf_open(path.c_str(), SFM_WRITE, &info);
    ASSERT_NE(sf, nullptr);
    sf_write_float(sf, x.data(), static_cast<sf_count_t>(x.size()));
    sf_close(sf);
  };
  sndfile_write(dir + "/a.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS);
  sndfile_write(dir + "/a.aiff", SF_FORMAT_AIFF | SF_FORMAT_PCM_16);
  {
    WriterOptions wo;
    wo.input_rate = 16000;
    auto w = AudioWriter::open(dir + "/a.flac", wo);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(x.data(), x.size()).ok());
    ASSERT_TRUE((*w)->close().ok());
  }
  testutil::write_bytes(dir + "/a.wav", make_wav({}, pcm16_payload(x)));

  ReadOptions o = lenient();
  o.limits.allowed_formats = input_format::kWav | input_format::kFlac;
  EXPECT_TRUE(read_audio(dir + "/a.wav", o).ok());
  EXPECT_TRUE(read_audio(dir + "/a.flac", o).ok());
  expect_error(read_audio(dir + "/a.ogg", o), ErrorCode::kUnsupported, "a.ogg", "Ogg input is not accepted");
  expect_error(read_audio(dir + "/a.aiff", o), ErrorCode::kUnsupported, "a.aiff", "not accepted");
  const std::string ogg = testutil::read_bytes(dir + "/a.ogg");
  expect_error(decode_audio(ogg, "req", o), ErrorCode::kUnsupported, "req", "Ogg input is not accepted");
  // Refused on its magic alone, before any decoder runs: "OggS" + junk.
  expect_error(decode_audio("OggS" + std::string(100, 'x'), "req", o), ErrorCode::kUnsupported, "req", "Ogg");
  expect_error(decode_audio("ID3" + std::string(100, '\0'), "req", o), ErrorCode::kUnsupported, "req", "MP3");
  // The same files are fine with every format allowed (the default).
  EXPECT_TRUE(read_audio(dir + "/a.ogg", lenient()).ok());
  EXPECT_TRUE(decode_audio(ogg, "req", lenient()).ok());
  EXPECT_TRUE(read_audio(dir + "/a.aiff", lenient()).ok());
  o.limits.allowed_formats = input_format::kOgg;
  expect_error(read_audio(dir + "/a.wav", o), ErrorCode::kUnsupported, "a.wav", "WAV input is not accepted");
  o.limits.allowed_formats = 0;
  EXPECT_EQ(read_audio(dir + "/a.wav", o).error().code, ErrorCode::kInvalidArgument);
}

// Every prefix of a valid WAV and FLAC file: success or a clean error, never a crash or a read
// past the buffer (ASan build).
TEST(AudioBadInput, EveryTruncationIsHandled) {
  const std::vector<float> x = sine(800, 8000, 300.0, 0.5);
  const std::string dir = test::scratch_dir("audio_trunc");
  WriterOptions wo;
  wo.input_rate = 8000;
  {
    auto w = AudioWriter::open(dir + "/a.flac", wo);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(x.data(), x.size()).ok());
    ASSERT_TRUE((*w)->close().ok());
  }
  ReadOptions o = lenient();
  o.limits.min_sample_rate = 8000;
  for (const std::string& file : {make_wav({.sample_rate = 8000}, pcm16_payload(x)), testutil::read_bytes(dir + "/a.flac")}) {
    size_t ok = 0;
    for (size_t n = 0; n < file.size(); ++n) {
      auto r = decode_audio(std::string_view(file).substr(0, n), "prefix", o);
      if (r.ok()) {
        ++ok;
        EXPECT_LE(r->samples.size(), x.size());
      } else {
        EXPECT_NE(r.error().message.find("prefix"), std::string::npos);
      }
    }
    auto whole = decode_audio(file, "whole", o);
    ASSERT_TRUE(whole.ok()) << whole.error().to_string();
    EXPECT_EQ(whole->samples.size(), x.size());
    EXPECT_LT(ok, file.size());
  }
}

}  // namespace
}  // namespace chorus::audio
