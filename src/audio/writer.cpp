#include "audio/writer.h"

#include <fcntl.h>
#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace chorus::audio {

static_assert(std::endian::native == std::endian::little, "raw/WAV output assumes a little-endian host");

class AudioWriter::Sink {
 public:
  virtual ~Sink() = default;
  virtual Status write_pcm16(const int16_t* s, size_t n) = 0;
  virtual Status write_f32(const float* s, size_t n) = 0;
  virtual Status finish() = 0;  // called once
};

namespace {

constexpr uint32_t kUnknownLength = 0xFFFFFFFFu;

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* container_name(AudioContainer c) {
  switch (c) {
    case AudioContainer::kWav: return "wav";
    case AudioContainer::kFlac: return "flac";
    case AudioContainer::kRaw: return "raw";
    case AudioContainer::kAuto: break;
  }
  return "auto";
}

// A file written by libsndfile (it fills in the header sizes on close).
class SndfileSink final : public AudioWriter::Sink {
 public:
  SndfileSink(SNDFILE* sf, std::string path) : sf_(sf), path_(std::move(path)) {}
  ~SndfileSink() override {
    if (sf_) sf_close(sf_);
  }
  Status write_pcm16(const int16_t* s, size_t n) override {
    return check(sf_write_short(sf_, s, static_cast<sf_count_t>(n)), n);
  }
  Status write_f32(const float* s, size_t n) override {
    return check(sf_write_float(sf_, s, static_cast<sf_count_t>(n)), n);
  }
  Status finish() override {
    const int rc = sf_close(sf_);
    sf_ = nullptr;
    if (rc != 0) return make_error(ErrorCode::kIo, path_ + ": closing failed (libsndfile: " + sf_error_number(rc) + ")");
    return ok_status();
  }

 private:
  Status check(sf_count_t written, size_t n) {
    if (written == static_cast<sf_count_t>(n)) return ok_status();
    return make_error(ErrorCode::kIo, path_ + ": write failed (libsndfile: " + sf_strerror(sf_) + ")");
  }
  SNDFILE* sf_;
  std::string path_;
};

// WAV with a streaming header, or raw samples, pushed to a byte sink.
class StreamSink final : public AudioWriter::Sink {
 public:
  StreamSink(AudioWriter::ByteSink sink, bool wav, int rate, SampleFormat format)
      : sink_(std::move(sink)), wav_(wav), rate_(rate), format_(format) {}

  Status start() {
    if (!wav_) return ok_status();
    const auto header = wav_header(rate_, format_, kUnknownLength);
    return sink_(header.data(), header.size());
  }
  Status write_pcm16(const int16_t* s, size_t n) override { return push(s, n * sizeof(int16_t)); }
  Status write_f32(const float* s, size_t n) override { return push(s, n * sizeof(float)); }
  Status finish() override { return on_finish_ ? on_finish_(data_bytes_) : ok_status(); }

  // Called with the final data size; stdout uses it to patch the header when it can seek.
  std::function<Status(uint64_t)> on_finish_;

 private:
  Status push(const void* p, size_t bytes) {
    data_bytes_ += bytes;
    return sink_(static_cast<const uint8_t*>(p), bytes);
  }
  AudioWriter::ByteSink sink_;
  bool wav_;
  int rate_;
  SampleFormat format_;
  uint64_t data_bytes_ = 0;
};

Status write_all_fd(int fd, const uint8_t* p, size_t n, const char* label) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return make_error(ErrorCode::kIo, std::string(label) + ": write failed: " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}

// When stdout is a regular file we can go back and write the real sizes into the header.
Status patch_wav_sizes(int fd, off_t start, uint64_t data_bytes) {
  if (data_bytes > 0xFFFFFFFFull - 36) return ok_status();  // too long for WAV: keep "unknown"
  uint8_t riff[4], data[4];
  put_u32(riff, static_cast<uint32_t>(36 + data_bytes));
  put_u32(data, static_cast<uint32_t>(data_bytes));
  if (::pwrite(fd, riff, 4, start + 4) != 4 || ::pwrite(fd, data, 4, start + 40) != 4) {
    return make_error(ErrorCode::kIo, std::string("<stdout>: patching the WAV header failed: ") + std::strerror(errno));
  }
  return ok_status();
}

}  // namespace

std::optional<AudioContainer> container_from_name(const std::string& name) {
  const std::string n = lower(name);
  if (n == "wav" || n == "wave") return AudioContainer::kWav;
  if (n == "flac") return AudioContainer::kFlac;
  if (n == "raw" || n == "pcm") return AudioContainer::kRaw;
  return std::nullopt;
}

std::optional<AudioContainer> container_from_path(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return std::nullopt;
  return container_from_name(path.substr(dot + 1));
}

std::array<uint8_t, 44> wav_header(int sample_rate, SampleFormat format, uint32_t data_bytes) {
  const uint16_t bytes_per_sample = format == SampleFormat::kPcm16 ? 2 : 4;
  const uint32_t riff_size = data_bytes == kUnknownLength || data_bytes > kUnknownLength - 36 ? kUnknownLength
                                                                                               : 36 + data_bytes;
  std::array<uint8_t, 44> h{};
  std::memcpy(&h[0], "RIFF", 4);
  put_u32(&h[4], riff_size);
  std::memcpy(&h[8], "WAVEfmt ", 8);
  put_u32(&h[16], 16);                                             // fmt chunk size
  put_u16(&h[20], format == SampleFormat::kPcm16 ? 1 : 3);         // PCM / IEEE float
  put_u16(&h[22], 1);                                              // channels
  put_u32(&h[24], static_cast<uint32_t>(sample_rate));
  put_u32(&h[28], static_cast<uint32_t>(sample_rate) * bytes_per_sample);  // byte rate
  put_u16(&h[32], bytes_per_sample);                               // block align
  put_u16(&h[34], static_cast<uint16_t>(8 * bytes_per_sample));    // bits per sample
  std::memcpy(&h[36], "data", 4);
  put_u32(&h[40], data_bytes);
  return h;
}

int16_t float_to_pcm16(float x) {
  if (!(x == x)) return 0;  // NaN
  const float c = std::clamp(x, -1.0f, 1.0f);
  return static_cast<int16_t>(std::lrint(static_cast<double>(c) * 32767.0));  // double: exact rounding
}

Result<std::unique_ptr<AudioWriter>> AudioWriter::make(std::unique_ptr<Sink> sink, AudioContainer container,
                                                       const WriterOptions& opts) {
  std::unique_ptr<AudioWriter> w(new AudioWriter());
  w->sink_ = std::move(sink);
  w->container_ = container;
  w->format_ = opts.sample_format;
  w->output_rate_ = opts.output_rate == 0 ? opts.input_rate : opts.output_rate;
  if (w->output_rate_ != opts.input_rate) {
    CHORUS_ASSIGN(StreamResampler rs, StreamResampler::create(opts.input_rate, w->output_rate_));
    w->resampler_.emplace(std::move(rs));
  }
  return w;
}

namespace {

Status check_options(const WriterOptions& o, AudioContainer container, const std::string& label) {
  const auto bad_rate = [](int r) { return r < kMinSampleRate || r > kMaxSampleRate; };
  if (bad_rate(o.input_rate) || (o.output_rate != 0 && bad_rate(o.output_rate))) {
    return make_error(ErrorCode::kInvalidArgument, label + ": sample rate outside [" + std::to_string(kMinSampleRate) +
                                                       ", " + std::to_string(kMaxSampleRate) + "]");
  }
  if (container == AudioContainer::kFlac && o.sample_format != SampleFormat::kPcm16) {
    return make_error(ErrorCode::kInvalidArgument, label + ": FLAC output supports 16-bit PCM only");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<AudioWriter>> AudioWriter::open(const std::string& path, const WriterOptions& opts) {
  if (path.empty()) return make_error(ErrorCode::kInvalidArgument, "audio output: empty path");
  AudioContainer container = opts.container;
  if (path == "-") {
    if (container == AudioContainer::kAuto) container = AudioContainer::kWav;
    if (container == AudioContainer::kFlac) {
      return make_error(ErrorCode::kUnsupported, "<stdout>: FLAC cannot be streamed; use wav or raw");
    }
    CHORUS_TRY(check_options(opts, container, "<stdout>"));
    std::fflush(stdout);  // keep anything already buffered ahead of the audio
    const int out_rate = opts.output_rate == 0 ? opts.input_rate : opts.output_rate;
    auto sink = std::make_unique<StreamSink>(
        [](const uint8_t* p, size_t n) { return write_all_fd(STDOUT_FILENO, p, n, "<stdout>"); },
        container == AudioContainer::kWav, out_rate, opts.sample_format);
    const off_t start = ::lseek(STDOUT_FILENO, 0, SEEK_CUR);
    const int flags = ::fcntl(STDOUT_FILENO, F_GETFL);
    if (container == AudioContainer::kWav && start >= 0 && flags >= 0 && !(flags & O_APPEND)) {
      sink->on_finish_ = [start](uint64_t bytes) { return patch_wav_sizes(STDOUT_FILENO, start, bytes); };
    }
    CHORUS_TRY(sink->start());
    return make(std::move(sink), container, opts);
  }

  if (container == AudioContainer::kAuto) {
    const auto c = container_from_path(path);
    if (!c) {
      return make_error(ErrorCode::kInvalidArgument,
                        path + ": cannot tell the audio format from the extension (use .wav, .flac, .raw or .pcm)");
    }
    container = *c;
  }
  CHORUS_TRY(check_options(opts, container, path));
  SF_INFO info{};
  info.channels = 1;
  info.samplerate = opts.output_rate == 0 ? opts.input_rate : opts.output_rate;
  const int subtype = opts.sample_format == SampleFormat::kPcm16 ? SF_FORMAT_PCM_16 : SF_FORMAT_FLOAT;
  switch (container) {
    case AudioContainer::kWav: info.format = SF_FORMAT_WAV | subtype; break;
    case AudioContainer::kFlac: info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16; break;
    default: info.format = SF_FORMAT_RAW | subtype | SF_ENDIAN_LITTLE; break;
  }
  if (!sf_format_check(&info)) {
    return make_error(ErrorCode::kUnsupported,
                      path + ": libsndfile cannot write " + container_name(container) + " in this sample format");
  }
  SNDFILE* sf = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!sf) {
    return make_error(ErrorCode::kIo, path + ": cannot create audio file (libsndfile: " + sf_strerror(nullptr) + ")");
  }
  return make(std::make_unique<SndfileSink>(sf, path), container, opts);
}

Result<std::unique_ptr<AudioWriter>> AudioWriter::open_stream(ByteSink sink, const WriterOptions& opts) {
  AudioContainer container = opts.container == AudioContainer::kAuto ? AudioContainer::kWav : opts.container;
  if (!sink) return make_error(ErrorCode::kInvalidArgument, "audio stream: no byte sink");
  if (container == AudioContainer::kFlac) {
    return make_error(ErrorCode::kUnsupported, "audio stream: FLAC cannot be streamed; use wav or raw");
  }
  CHORUS_TRY(check_options(opts, container, "audio stream"));
  const int out_rate = opts.output_rate == 0 ? opts.input_rate : opts.output_rate;
  auto s = std::make_unique<StreamSink>(std::move(sink), container == AudioContainer::kWav, out_rate,
                                        opts.sample_format);
  CHORUS_TRY(s->start());
  return make(std::move(s), container, opts);
}

AudioWriter::~AudioWriter() {
  if (!closed_) (void)close();
}

Status AudioWriter::emit(const float* samples, size_t n) {
  constexpr size_t kBlock = 4096;
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = std::min(kBlock, n - off);
    Status st;
    if (format_ == SampleFormat::kPcm16) {
      pcm16_.resize(m);
      for (size_t i = 0; i < m; ++i) {
        const float v = samples[off + i];
        if (!std::isfinite(v)) ++nonfinite_;
        pcm16_[i] = float_to_pcm16(std::isfinite(v) ? v : 0.0f);
      }
      st = sink_->write_pcm16(pcm16_.data(), m);
    } else {
      clean_.resize(m);
      for (size_t i = 0; i < m; ++i) {
        const float v = samples[off + i];
        if (!std::isfinite(v)) ++nonfinite_;
        clean_[i] = std::isfinite(v) ? v : 0.0f;
      }
      st = sink_->write_f32(clean_.data(), m);
    }
    if (!st.ok()) {
      failed_ = true;
      return st;
    }
    frames_written_ += m;
  }
  return ok_status();
}

Status AudioWriter::write(const float* samples, size_t n) {
  if (closed_) return make_error(ErrorCode::kInvalidArgument, "audio writer: write after close");
  if (failed_) return make_error(ErrorCode::kIo, "audio writer: an earlier write failed");
  if (n == 0) return ok_status();
  if (!samples) return make_error(ErrorCode::kInvalidArgument, "audio writer: null samples");
  if (!resampler_) return emit(samples, n);
  resampled_.clear();
  // The resampler would spread a NaN over its whole filter length: sanitise first.
  resample_in_.assign(samples, samples + n);
  for (float& v : resample_in_) {
    if (!std::isfinite(v)) {
      ++nonfinite_;
      v = 0.0f;
    }
  }
  CHORUS_TRY(resampler_->process(resample_in_.data(), resample_in_.size(), resampled_));
  return emit(resampled_.data(), resampled_.size());
}

Status AudioWriter::close() {
  if (closed_) return ok_status();
  closed_ = true;
  Status first = ok_status();
  if (resampler_ && !failed_) {
    resampled_.clear();
    first = resampler_->flush(resampled_);
    if (first.ok()) first = emit(resampled_.data(), resampled_.size());
  }
  Status fin = sink_->finish();
  return first.ok() ? fin : first;
}

}  // namespace chorus::audio
