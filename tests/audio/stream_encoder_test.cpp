// The streaming encoders of the speech API: each format's bytes checked by an independent decoder
// (libsndfile through read's decode_audio, hand-computed PCM), and bytes leaving before the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "audio/reader.h"
#include "audio/stream_encoder.h"
#include "audio/tempo.h"
#include "audio_test_util.h"

namespace chorus::audio {
namespace {

struct Collected {
  std::string bytes;
  size_t calls = 0;
};

std::unique_ptr<StreamEncoder> make(StreamFormat f, Collected& c, int rate = 24000) {
  auto e = StreamEncoder::create(f, rate, [&c](const uint8_t* d, size_t n) {
    c.bytes.append(reinterpret_cast<const char*>(d), n);
    ++c.calls;
    return ok_status();
  });
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().to_string());
  return e.ok() ? std::move(*e) : nullptr;
}

// Written here, not taken from the writer: clip, scale by 32767, round half away from zero.
int16_t expected_s16(float x) {
  if (!std::isfinite(x)) return 0;
  const double c = std::clamp(static_cast<double>(x), -1.0, 1.0) * 32767.0;
  return static_cast<int16_t>(std::lround(c));
}

std::vector<float> test_signal(size_t n) {
  auto x = testutil::sine(n, 24000, 440.0, 0.5);
  x[10] = 1.7f;  // clipped
  x[11] = -2.0f;
  x[12] = std::nanf("");
  return x;
}

double rms(const std::vector<float>& x, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s / std::max<size_t>(1, to - from));
}

TEST(StreamEncoder, FormatNames) {
  for (const char* n : {"wav", "pcm", "flac", "mp3", "opus"}) {
    auto f = stream_format_from_name(n);
    ASSERT_TRUE(f.has_value()) << n;
    EXPECT_STREQ(stream_format_name(*f), n);
  }
  EXPECT_FALSE(stream_format_from_name("aac").has_value());
  EXPECT_FALSE(stream_format_from_name("MP3").has_value());
  EXPECT_FALSE(stream_format_from_name("").has_value());
  EXPECT_STREQ(stream_format_mime(StreamFormat::kMp3), "audio/mpeg");
}

TEST(StreamEncoder, PcmIsS16leOfTheSamples) {
  Collected c;
  auto e = make(StreamFormat::kPcm, c);
  const auto x = test_signal(1000);
  ASSERT_TRUE(e->write(x.data(), 600).ok());
  ASSERT_TRUE(e->write(x.data() + 600, 400).ok());
  ASSERT_TRUE(e->finish().ok());
  ASSERT_EQ(c.bytes.size(), 2000u);
  for (size_t i = 0; i < x.size(); ++i) {
    int16_t v;
    std::memcpy(&v, c.bytes.data() + 2 * i, 2);
    ASSERT_EQ(v, expected_s16(x[i])) << i;
  }
}

TEST(StreamEncoder, WavHasAStreamingHeaderThenPcm) {
  Collected c;
  auto e = make(StreamFormat::kWav, c);
  const auto x = test_signal(480);
  ASSERT_TRUE(e->write(x.data(), x.size()).ok());
  ASSERT_TRUE(e->finish().ok());
  ASSERT_EQ(c.bytes.size(), 44u + 960u);
  EXPECT_EQ(c.bytes.substr(0, 4), "RIFF");
  EXPECT_EQ(c.bytes.substr(8, 8), "WAVEfmt ");
  EXPECT_EQ(c.bytes.substr(36, 4), "data");
  uint32_t riff, data, rate;
  std::memcpy(&riff, c.bytes.data() + 4, 4);
  std::memcpy(&data, c.bytes.data() + 40, 4);
  std::memcpy(&rate, c.bytes.data() + 24, 4);
  EXPECT_EQ(riff, 0xFFFFFFFFu);
  EXPECT_EQ(data, 0xFFFFFFFFu);
  EXPECT_EQ(rate, 24000u);
  int16_t v;
  std::memcpy(&v, c.bytes.data() + 44 + 2 * 100, 2);
  EXPECT_EQ(v, expected_s16(x[100]));
}

TEST(StreamEncoder, FlacDecodesLosslesslyTo16Bit) {
  Collected c;
  auto e = make(StreamFormat::kFlac, c);
  const auto x = test_signal(24000);
  for (size_t off = 0; off < x.size(); off += 1920) ASSERT_TRUE(e->write(x.data() + off, std::min<size_t>(1920, x.size() - off)).ok());
  ASSERT_TRUE(e->finish().ok());
  ASSERT_GE(c.bytes.size(), 4u);
  EXPECT_EQ(c.bytes.substr(0, 4), "fLaC");
  ReadOptions ro;
  ro.target_rate = 0;
  auto a = decode_audio(c.bytes, "flac stream", ro);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->sample_rate, 24000);
  ASSERT_EQ(a->samples.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::lround(a->samples[i] * 32768.0), expected_s16(x[i])) << i;
}

TEST(StreamEncoder, Mp3StreamsAndDecodesToTheSignal) {
  Collected c;
  auto e = make(StreamFormat::kMp3, c);
  const auto x = testutil::sine(48000, 24000, 440.0, 0.5);
  for (size_t off = 0; off < x.size(); off += 1920) ASSERT_TRUE(e->write(x.data() + off, 1920).ok());
  const size_t before_finish = c.bytes.size();
  ASSERT_TRUE(e->finish().ok());
  EXPECT_GT(before_finish, c.bytes.size() / 2) << "most bytes must leave before the end";
  ASSERT_GE(c.bytes.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(c.bytes[0]), 0xFF);           // frame sync, no ID3 or Xing tag
  EXPECT_EQ(static_cast<uint8_t>(c.bytes[1]) & 0xE0, 0xE0);
  ReadOptions ro;
  ro.target_rate = 0;
  auto a = decode_audio(c.bytes, "mp3 stream", ro);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->sample_rate, 24000);
  EXPECT_NEAR(static_cast<double>(a->samples.size()), 48000.0, 3000.0);
  const size_t n = std::min(a->samples.size(), size_t{40000});
  EXPECT_NEAR(rms(a->samples, 8000, n), 0.5 / std::sqrt(2.0), 0.05);
}

TEST(StreamEncoder, OpusIsOggOpusAndDecodesToTheSignal) {
  Collected c;
  auto e = make(StreamFormat::kOpus, c);
  ASSERT_GE(c.bytes.size(), 4u) << "the headers go out at once";
  EXPECT_EQ(c.bytes.substr(0, 4), "OggS");
  EXPECT_NE(c.bytes.find("OpusHead"), std::string::npos);
  const auto x = testutil::sine(48000, 24000, 440.0, 0.5);
  for (size_t off = 0; off < x.size(); off += 1920) ASSERT_TRUE(e->write(x.data() + off, 1920).ok());
  const size_t before_finish = c.bytes.size();
  ASSERT_TRUE(e->finish().ok());
  EXPECT_GT(before_finish, c.bytes.size() / 2) << "pages must leave before the end";
  ReadOptions ro;
  ro.target_rate = 24000;
  auto a = decode_audio(c.bytes, "opus stream", ro);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_NEAR(static_cast<double>(a->samples.size()), 48000.0, 3000.0);
  EXPECT_NEAR(rms(a->samples, 8000, std::min(a->samples.size(), size_t{40000})), 0.5 / std::sqrt(2.0), 0.05);
}

TEST(StreamEncoder, AFailingSinkStopsTheEncoder) {
  for (auto f : {StreamFormat::kPcm, StreamFormat::kMp3, StreamFormat::kFlac}) {
    auto e = StreamEncoder::create(f, 24000, [](const uint8_t*, size_t) { return Status(make_error(ErrorCode::kIo, "gone")); });
    if (!e.ok()) continue;  // a format whose header goes out at once fails here already
    const auto x = testutil::sine(24000, 24000, 440.0, 0.5);
    Status st = (*e)->write(x.data(), x.size());
    if (st.ok()) st = (*e)->finish();
    EXPECT_FALSE(st.ok()) << stream_format_name(f);
  }
}

// Counts upward zero crossings per second: the pitch of a sine.
double crossings_per_second(const std::vector<float>& x, size_t from, size_t to, int rate) {
  int n = 0;
  for (size_t i = from + 1; i < to; ++i) n += x[i - 1] < 0 && x[i] >= 0;
  return n * static_cast<double>(rate) / static_cast<double>(to - from);
}

TEST(Tempo, DoubleSpeedHalvesTheLengthAndKeepsThePitch) {
  const auto x = testutil::sine(48000, 24000, 300.0, 0.5);
  for (double speed : {2.0, 0.5}) {
    auto t = TempoStretcher::create(24000, speed);
    ASSERT_TRUE(t.ok());
    std::vector<float> out;
    for (size_t off = 0; off < x.size(); off += 1920) (*t)->process(x.data() + off, 1920, out);
    (*t)->flush(out);
    EXPECT_NEAR(static_cast<double>(out.size()), 48000.0 / speed, 48000.0 / speed * 0.05) << speed;
    ASSERT_GT(out.size(), 8000u);
    EXPECT_NEAR(crossings_per_second(out, 2000, out.size() - 2000, 24000), 300.0, 15.0) << speed;
  }
  EXPECT_FALSE(TempoStretcher::create(24000, 0.2).ok());
  EXPECT_FALSE(TempoStretcher::create(24000, 4.5).ok());
  EXPECT_FALSE(TempoStretcher::create(24000, std::nan("")).ok());
}

}  // namespace
}  // namespace chorus::audio
