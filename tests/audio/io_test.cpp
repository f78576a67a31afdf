// Writer -> reader round trips through every output format, streaming WAV to a byte sink and to
// stdout (pipe and regular file), downmixing and resampling on input, and the compressed formats
// libsndfile decodes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "audio/reader.h"
#include "audio/writer.h"
#include "audio_test_util.h"
#include "support/test_support.h"

namespace chorus::audio {
namespace {

using testutil::pcm16_round_trip;
using testutil::read_bytes;
using testutil::sine;
using testutil::sine_at;

// Speech-like test signal: two tones, noise and a few out-of-range peaks (to exercise clipping).
std::vector<float> test_signal(size_t n, int rate) {
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / rate;
    x[i] = static_cast<float>(sine_at(0.4, 220.0, t) + sine_at(0.3, 1375.0, t)) + noise(rng);
  }
  x[10] = 1.7f;
  x[11] = -3.0f;
  x[12] = 1.0f;
  x[13] = -1.0f;
  return x;
}

ReadOptions keep_rate() {
  ReadOptions o;
  o.target_rate = 0;
  o.limits.min_seconds = 0;
  return o;
}

Audio write_then_read(const std::string& path, const std::vector<float>& x, const WriterOptions& wo) {
  {
    auto w = AudioWriter::open(path, wo);
    EXPECT_TRUE(w.ok()) << w.error().to_string();
    if (!w.ok()) return {};
    // Uneven blocks, as a streaming decoder would hand them over.
    for (size_t off = 0, step = 1; off < x.size(); off += step, step = step * 3 % 1999 + 1) {
      EXPECT_TRUE((*w)->write(x.data() + off, std::min(step, x.size() - off)).ok());
    }
    EXPECT_TRUE((*w)->close().ok());
    EXPECT_TRUE((*w)->close().ok());  // idempotent
  }
  auto a = read_audio(path, keep_rate());
  EXPECT_TRUE(a.ok()) << a.error().to_string();
  return a.ok() ? std::move(a).value() : Audio{};
}

void expect_pcm16_of(const std::vector<float>& got, const std::vector<float>& x) {
  ASSERT_EQ(got.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(pcm16_round_trip(x[i]))) << i;
}

TEST(AudioIo, Wav16RoundTripIsQuantisedAndClipped) {
  const std::string dir = test::scratch_dir("audio_wav16");
  const auto x = test_signal(12345, 24000);
  const Audio a = write_then_read(dir + "/a.wav", x, {});
  EXPECT_EQ(a.sample_rate, 24000);
  EXPECT_EQ(a.source_channels, 1);
  expect_pcm16_of(a.samples, x);
  EXPECT_EQ(a.samples[11], -32767.0f / 32768.0f);  // -3.0 clipped
}

TEST(AudioIo, FloatWavRoundTripIsExact) {
  const std::string dir = test::scratch_dir("audio_wavf");
  const auto x = test_signal(5000, 16000);
  WriterOptions wo;
  wo.input_rate = 16000;
  wo.sample_format = SampleFormat::kFloat32;
  const Audio a = write_then_read(dir + "/a.WAV", x, wo);
  EXPECT_EQ(a.sample_rate, 16000);
  EXPECT_EQ(a.samples, x);  // float output is not clipped
}

TEST(AudioIo, FlacRoundTripIsLossless16Bit) {
  const std::string dir = test::scratch_dir("audio_flac");
  const auto x = test_signal(30000, 24000);
  const Audio a = write_then_read(dir + "/a.flac", x, {});
  expect_pcm16_of(a.samples, x);
  EXPECT_EQ(read_bytes(dir + "/a.flac").substr(0, 4), "fLaC");
}

TEST(AudioIo, RawFileIsS16leOrF32le) {
  const std::string dir = test::scratch_dir("audio_raw");
  const std::vector<float> x = {0.0f, 0.5f, -0.5f, 1.5f, -2.0f, NAN, INFINITY, 1.0f / 32767};
  for (const char* name : {"a.raw", "a.pcm"}) {
    auto w = AudioWriter::open(dir + "/" + name, {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(x.data(), x.size()).ok());
    ASSERT_TRUE((*w)->close().ok());
    EXPECT_EQ((*w)->nonfinite_samples(), 2u);
    const std::string b = read_bytes(dir + "/" + name);
    ASSERT_EQ(b.size(), 2 * x.size());
    const int16_t want[] = {0, 16384, -16384, 32767, -32767, 0, 0, 1};
    for (size_t i = 0; i < x.size(); ++i) {
      const int16_t v = static_cast<int16_t>(static_cast<uint8_t>(b[2 * i]) | (static_cast<uint8_t>(b[2 * i + 1]) << 8));
      EXPECT_EQ(v, want[i]) << name << " sample " << i;
    }
  }
  WriterOptions wo;
  wo.sample_format = SampleFormat::kFloat32;
  wo.container = AudioContainer::kRaw;
  auto w = AudioWriter::open(dir + "/float.bin", wo);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->write(x.data(), 3).ok());
  ASSERT_TRUE((*w)->close().ok());
  EXPECT_EQ(read_bytes(dir + "/float.bin"), testutil::f32_payload({0.0f, 0.5f, -0.5f}));
}

TEST(AudioIo, FormatFromExtension) {
  EXPECT_EQ(container_from_path("out/x.wav"), AudioContainer::kWav);
  EXPECT_EQ(container_from_path("x.FLAC"), AudioContainer::kFlac);
  EXPECT_EQ(container_from_path("x.pcm"), AudioContainer::kRaw);
  EXPECT_EQ(container_from_path("x.mp3"), std::nullopt);
  EXPECT_EQ(container_from_path("dir.wav/noext"), std::nullopt);
  const std::string dir = test::scratch_dir("audio_ext");
  auto w = AudioWriter::open(dir + "/x.mp3", {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, ErrorCode::kInvalidArgument);
  WriterOptions flac_float;
  flac_float.sample_format = SampleFormat::kFloat32;
  EXPECT_FALSE(AudioWriter::open(dir + "/x.flac", flac_float).ok());
  auto missing_dir = AudioWriter::open(dir + "/no/such/dir/x.wav", {});
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_EQ(missing_dir.error().code, ErrorCode::kIo);
}

TEST(AudioIo, WriterResamplesOutput) {
  const std::string dir = test::scratch_dir("audio_out_rate");
  const auto x = sine(48000, 24000, 500.0, 0.5);  // 2 s at 24 kHz
  WriterOptions wo;
  wo.output_rate = 16000;
  wo.sample_format = SampleFormat::kFloat32;
  const Audio a = write_then_read(dir + "/a.wav", x, wo);
  EXPECT_EQ(a.sample_rate, 16000);
  EXPECT_NEAR(static_cast<double>(a.samples.size()), 32000.0, 1.0);
  double worst = 0;
  for (size_t i = 200; i + 200 < a.samples.size(); ++i) {
    worst = std::max(worst, std::fabs(a.samples[i] - sine_at(0.5, 500.0, i / 16000.0)));
  }
  EXPECT_LT(worst, 1e-4);
}

TEST(AudioIo, StreamWavToByteSinkDecodes) {
  std::string bytes;
  const auto x = test_signal(7000, 24000);
  WriterOptions wo;
  wo.sample_format = SampleFormat::kFloat32;
  auto w = AudioWriter::open_stream(
      [&](const uint8_t* p, size_t n) {
        bytes.append(reinterpret_cast<const char*>(p), n);
        return ok_status();
      },
      wo);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(bytes.size(), 44u);  // the header goes out before any audio
  ASSERT_TRUE((*w)->write(x.data(), x.size()).ok());
  ASSERT_TRUE((*w)->close().ok());
  ASSERT_EQ(bytes.size(), 44 + 4 * x.size());
  EXPECT_EQ(bytes.substr(0, 4), "RIFF");
  EXPECT_EQ(bytes.substr(4, 4), std::string(4, '\xff'));   // unknown RIFF size
  EXPECT_EQ(bytes.substr(40, 4), std::string(4, '\xff'));  // unknown data size
  auto a = decode_audio(bytes, "stream", keep_rate());
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->samples, x);
}

TEST(AudioIo, ByteSinkFailureStopsTheWriter) {
  int calls = 0;
  auto w = AudioWriter::open_stream([&](const uint8_t*, size_t) -> Status {
    if (++calls > 1) return make_error(ErrorCode::kIo, "client went away");
    return ok_status();
  });
  ASSERT_TRUE(w.ok());
  const float x[8] = {};
  auto st = (*w)->write(x, 8);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "client went away");
  EXPECT_FALSE((*w)->write(x, 8).ok());
}

// Runs `body` with fd 1 redirected to `fd`.
template <class F>
void with_stdout(int fd, F body) {
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_GE(::dup2(fd, STDOUT_FILENO), 0);
  body();
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
}

TEST(AudioIo, StdoutToPipeStreamsUnknownLengthWav) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const auto x = test_signal(4000, 24000);  // 8 KB: fits the pipe buffer, no reader thread needed
  with_stdout(p[1], [&] {
    auto w = AudioWriter::open("-", {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(x.data(), x.size()).ok());
    ASSERT_TRUE((*w)->close().ok());
  });
  ::close(p[1]);
  std::string bytes;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) bytes.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  ASSERT_EQ(bytes.size(), 44 + 2 * x.size());
  EXPECT_EQ(bytes.substr(40, 4), std::string(4, '\xff'));
  auto a = decode_audio(bytes, "pipe", keep_rate());
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  expect_pcm16_of(a->samples, x);
}

TEST(AudioIo, StdoutToRegularFileGetsRealSizes) {
  const std::string path = test::scratch_dir("audio_stdout") + "/out.wav";
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "", 0), 0);
  const auto x = test_signal(3000, 24000);
  with_stdout(fd, [&] {
    auto w = AudioWriter::open("-", {});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->write(x.data(), x.size()).ok());
    ASSERT_TRUE((*w)->close().ok());
  });
  ::close(fd);
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 44 + 2 * x.size());
  const auto u32 = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<uint8_t>(bytes[at]) | static_cast<uint8_t>(bytes[at + 1]) << 8 |
                                 static_cast<uint8_t>(bytes[at + 2]) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 3])) << 24);
  };
  EXPECT_EQ(u32(4), 36 + 2 * x.size());
  EXPECT_EQ(u32(40), 2 * x.size());
  auto a = read_audio(path, keep_rate());
  ASSERT_TRUE(a.ok());
  expect_pcm16_of(a->samples, x);
}

TEST(AudioIo, ReadsStdin) {
  const std::string path = test::scratch_dir("audio_stdin") + "/in.wav";
  const auto x = sine(12000, 24000, 440.0, 0.7);  // in range: the hand-made WAV does not clip
  testutil::write_bytes(path, testutil::make_wav({.sample_rate = 24000}, testutil::pcm16_payload(x)));
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const int saved = ::dup(STDIN_FILENO);
  ASSERT_GE(::dup2(fd, STDIN_FILENO), 0);
  auto a = read_audio("-", keep_rate());
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  ::close(fd);
  std::clearerr(stdin);
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  expect_pcm16_of(a->samples, x);
}

TEST(AudioIo, StdoutRefusesFlac) {
  WriterOptions wo;
  wo.container = AudioContainer::kFlac;
  auto w = AudioWriter::open("-", wo);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, ErrorCode::kUnsupported);
}

// Writes interleaved frames with libsndfile directly (multi-channel input is not something our
// writer produces).
void write_with_sndfile(const std::string& path, int format, int channels, int rate, const std::vector<float>& frames) {
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = format;
  SNDFILE* sf = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(sf, nullptr) << sf_strerror(nullptr);
  ASSERT_EQ(sf_writef_float(sf, frames.data(), static_cast<sf_count_t>(frames.size() / channels)),
            static_cast<sf_count_t>(frames.size() / channels));
  sf_close(sf);
}

TEST(AudioIo, StereoIsDownmixedByAveraging) {
  const std::string path = test::scratch_dir("audio_stereo") + "/s.wav";
  const auto left = sine(14400, 24000, 300.0, 0.6);
  const auto right = sine(14400, 24000, 700.0, 0.2);
  std::vector<float> frames;
  for (size_t i = 0; i < left.size(); ++i) {
    frames.push_back(left[i]);
    frames.push_back(right[i]);
  }
  write_with_sndfile(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 2, 24000, frames);
  auto a = read_audio(path, {});
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->source_channels, 2);
  ASSERT_EQ(a->samples.size(), left.size());
  for (size_t i = 0; i < left.size(); ++i) ASSERT_FLOAT_EQ(a->samples[i], (left[i] + right[i]) / 2) << i;
}

TEST(AudioIo, InputIsResampledToTheTargetRate) {
  const std::string path = test::scratch_dir("audio_in_rate") + "/s.wav";
  const auto x = sine(44100, 44100, 1000.0, 0.5);
  std::vector<float> frames;  // 3 identical channels: the downmix must give the sine back
  for (float v : x) frames.insert(frames.end(), {v, v, v});
  write_with_sndfile(path, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 3, 44100, frames);
  auto a = read_audio(path, {});  // default target 24 kHz
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(a->sample_rate, 24000);
  EXPECT_EQ(a->source_sample_rate, 44100);
  ASSERT_EQ(a->samples.size(), 24000u);
  double worst = 0;
  for (size_t i = 200; i + 200 < a->samples.size(); ++i) {
    worst = std::max(worst, std::fabs(a->samples[i] - sine_at(0.5, 1000.0, i / 24000.0)));
  }
  EXPECT_LT(worst, 1e-5);
}

// Lossy formats: the decoded signal must correlate with the original tone (codec delay is allowed
// for by searching a small lag range).
double best_correlation(const std::vector<float>& got, const std::vector<float>& ref) {
  double best = 0;
  for (size_t lag = 0; lag < 4000 && lag < got.size(); ++lag) {
    double xy = 0, xx = 0, yy = 0;
    for (size_t i = 2000; i + lag < got.size() && i < ref.size() - 2000; ++i) {
      xy += got[i + lag] * ref[i];
      xx += got[i + lag] * got[i + lag];
      yy += ref[i] * ref[i];
    }
    if (xx > 0 && yy > 0) best = std::max(best, xy / std::sqrt(xx * yy));
  }
  return best;
}

TEST(AudioIo, CompressedFormatsDecode) {
  const std::string dir = test::scratch_dir("audio_lossy");
  const auto x = sine(48000, 48000, 440.0, 0.5);
  struct Case {
    const char* name;
    int format;
  } cases[] = {{"vorbis.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS},
               {"opus.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS},
               {"mp3.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III}};
  int tested = 0;
  for (const Case& c : cases) {
    SF_INFO probe{};
    probe.channels = 1;
    probe.samplerate = 48000;
    probe.format = c.format;
    if (!sf_format_check(&probe)) continue;  // this libsndfile build lacks the encoder
    write_with_sndfile(dir + "/" + c.name, c.format, 1, 48000, x);
    ReadOptions ro = keep_rate();
    auto a = read_audio(dir + "/" + c.name, ro);
    ASSERT_TRUE(a.ok()) << c.name << ": " << a.error().to_string();
    EXPECT_EQ(a->sample_rate, 48000) << c.name;
    EXPECT_NEAR(static_cast<double>(a->samples.size()), 48000.0, 3000.0) << c.name;
    EXPECT_GT(best_correlation(a->samples, x), 0.99) << c.name;
    ++tested;
  }
  EXPECT_GE(tested, 2) << "libsndfile without Ogg support?";
}

}  // namespace
}  // namespace chorus::audio
