#include "audio/reader.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "audio/resample.h"

namespace chorus::audio {
namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

Error err(ErrorCode code, const std::string& label, const std::string& what) {
  return make_error(code, label + ": " + what);
}

Status check_limits(const ReadOptions& o) {
  const AudioLimits& l = o.limits;
  const bool ok = l.min_seconds >= 0 && std::isfinite(l.max_seconds) && l.max_seconds > 0 &&
                  l.min_seconds <= l.max_seconds && l.max_channels >= 1 && l.min_sample_rate >= kMinSampleRate &&
                  l.max_sample_rate <= kMaxSampleRate && l.min_sample_rate <= l.max_sample_rate &&
                  l.max_abs_sample > 0 && l.silence_peak >= 0 && (l.allowed_formats & input_format::kAll) != 0 &&
                  (o.target_rate == 0 || (o.target_rate >= kMinSampleRate && o.target_rate <= kMaxSampleRate));
  if (!ok) return make_error(ErrorCode::kInvalidArgument, "audio read options: inconsistent limits or target rate");
  return ok_status();
}

const char* format_family_name(uint32_t family) {
  switch (family) {
    case input_format::kWav: return "WAV";
    case input_format::kFlac: return "FLAC";
    case input_format::kOgg: return "Ogg";
    case input_format::kMp3: return "MP3";
    default: return "this audio format (AIFF, AU, CAF, ...)";
  }
}

// The family the first bytes announce (magic numbers).
uint32_t sniff_format_family(std::string_view head) {
  const auto starts = [&](std::string_view magic, size_t at = 0) {
    return head.size() >= at + magic.size() && head.substr(at, magic.size()) == magic;
  };
  if ((starts("RIFF") || starts("RIFX") || starts("RF64") || starts("BW64")) && starts("WAVE", 8)) {
    return input_format::kWav;
  }
  if (starts(std::string_view("riff\x2e\x91\xcf\x11", 8))) return input_format::kWav;  // Wave64 GUID
  if (starts("fLaC")) return input_format::kFlac;
  if (starts("OggS")) return input_format::kOgg;
  if (starts("ID3")) return input_format::kMp3;
  if (head.size() >= 2 && static_cast<uint8_t>(head[0]) == 0xFF && (static_cast<uint8_t>(head[1]) & 0xE0) == 0xE0) {
    return input_format::kMp3;
  }
  return input_format::kOther;
}

// The family of the format libsndfile detected.
uint32_t detected_format_family(int sf_format) {
  switch (sf_format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_RF64:
    case SF_FORMAT_W64: return input_format::kWav;
    case SF_FORMAT_FLAC: return input_format::kFlac;
    case SF_FORMAT_OGG: return input_format::kOgg;
    case SF_FORMAT_MPEG: return input_format::kMp3;
    default: return input_format::kOther;
  }
}

Status check_format_allowed(uint32_t family, const AudioLimits& lim, const std::string& label) {
  if (lim.allowed_formats & family) return ok_status();
  return err(ErrorCode::kUnsupported, label, std::string(format_family_name(family)) + " input is not accepted here");
}

// libsndfile's open errors, as our codes.
Error open_error(int sf_code, const char* sf_message, const std::string& label) {
  const std::string detail = std::string(" (libsndfile: ") + (sf_message ? sf_message : "?") + ")";
  switch (sf_code) {
    case SF_ERR_UNRECOGNISED_FORMAT:
      return err(ErrorCode::kInvalidFormat, label, "not a recognised audio file" + detail);
    case SF_ERR_SYSTEM:
      return err(ErrorCode::kIo, label, "cannot be read" + detail);
    case SF_ERR_UNSUPPORTED_ENCODING:
      return err(ErrorCode::kUnsupported, label, "unsupported audio encoding" + detail);
    default:
      return err(ErrorCode::kInvalidFormat, label, "malformed audio file" + detail);
  }
}

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// Read-only in-memory file for sf_open_virtual.
struct MemoryFile {
  const char* data = nullptr;
  sf_count_t size = 0;
  sf_count_t pos = 0;
};

sf_count_t mem_length(void* user) { return static_cast<MemoryFile*>(user)->size; }

sf_count_t mem_seek(sf_count_t offset, int whence, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  sf_count_t base = 0;
  switch (whence) {
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = m->pos; break;
    case SEEK_END: base = m->size; break;
    default: return -1;
  }
  // Both operands are bounded by the file size or come from libsndfile; reject overflow anyway.
  sf_count_t target = 0;
  if (__builtin_add_overflow(base, offset, &target) || target < 0) return -1;
  m->pos = target;  // seeking past the end is allowed, reads there return 0
  return m->pos;
}

sf_count_t mem_read(void* dst, sf_count_t count, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  if (count <= 0 || m->pos >= m->size) return 0;
  const sf_count_t n = std::min(count, m->size - m->pos);
  std::memcpy(dst, m->data + m->pos, static_cast<size_t>(n));
  m->pos += n;
  return n;
}

sf_count_t mem_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t mem_tell(void* user) { return static_cast<MemoryFile*>(user)->pos; }

// Everything after a successful open: header checks, bounded decode, downmix, sample checks,
// resampling.
Result<Audio> decode_open_file(SNDFILE* sf, const SF_INFO& info, const std::string& label, const ReadOptions& opts) {
  const AudioLimits& lim = opts.limits;
  CHORUS_TRY(check_format_allowed(detected_format_family(info.format), lim, label));
  if (info.channels < 1) {
    return err(ErrorCode::kInvalidFormat, label, "declares " + std::to_string(info.channels) + " channels");
  }
  if (info.channels > lim.max_channels) {
    return err(ErrorCode::kOutOfRange, label,
               std::to_string(info.channels) + " channels, at most " + std::to_string(lim.max_channels) + " allowed");
  }
  if (info.samplerate < lim.min_sample_rate || info.samplerate > lim.max_sample_rate) {
    return err(ErrorCode::kOutOfRange, label,
               "sample rate " + std::to_string(info.samplerate) + " Hz outside [" + std::to_string(lim.min_sample_rate) +
                   ", " + std::to_string(lim.max_sample_rate) + "]");
  }
  const int rate = info.samplerate;
  const int channels = info.channels;
  // max_seconds * rate <= 1e300 is finite; clamp before converting to an integer.
  const double max_frames_d = std::floor(lim.max_seconds * rate);
  const uint64_t max_frames =
      max_frames_d >= 9.0e15 ? static_cast<uint64_t>(9.0e15) : static_cast<uint64_t>(max_frames_d);
  const bool length_known = info.frames > 0 && info.frames != SF_COUNT_MAX;
  if (length_known && static_cast<uint64_t>(info.frames) > max_frames) {
    return err(ErrorCode::kResourceExhausted, label,
               "is " + fmt_seconds(static_cast<double>(info.frames) / rate) + " long, the limit is " +
                   fmt_seconds(lim.max_seconds));
  }

  std::vector<float> mono;
  if (length_known) mono.reserve(static_cast<size_t>(info.frames));
  constexpr sf_count_t kBlockFrames = 4096;
  std::vector<float> block(static_cast<size_t>(kBlockFrames) * channels);
  const float inv_channels = 1.0f / static_cast<float>(channels);
  float peak = 0.0f;
  for (;;) {
    const sf_count_t got = sf_readf_float(sf, block.data(), kBlockFrames);
    if (got <= 0) break;
    if (mono.size() + static_cast<uint64_t>(got) > max_frames) {
      return err(ErrorCode::kResourceExhausted, label, "is longer than the limit of " + fmt_seconds(lim.max_seconds));
    }
    for (sf_count_t f = 0; f < got; ++f) {
      const float* frame = block.data() + f * channels;
      float sum = 0.0f;
      for (int c = 0; c < channels; ++c) {
        const float v = frame[c];
        if (!std::isfinite(v) || std::fabs(v) > lim.max_abs_sample) {
          const uint64_t index = mono.size();
          return err(ErrorCode::kInvalidFormat, label,
                     std::string(std::isfinite(v) ? "absurd sample value" : "non-finite sample") + " at frame " +
                         std::to_string(index) + " (" + fmt_seconds(static_cast<double>(index) / rate) + ")");
        }
        sum += v;
      }
      const float m = sum * inv_channels;
      peak = std::max(peak, std::fabs(m));
      mono.push_back(m);
    }
  }
  if (const int e = sf_error(sf); e != SF_ERR_NO_ERROR) {
    return err(ErrorCode::kInvalidFormat, label,
               "decoding failed after " + std::to_string(mono.size()) + " frames (libsndfile: " + sf_error_number(e) + ")");
  }
  if (mono.empty()) return err(ErrorCode::kInvalidFormat, label, "contains no audio samples");
  if (length_known && mono.size() < static_cast<uint64_t>(info.frames)) {
    return err(ErrorCode::kInvalidFormat, label,
               "truncated or corrupt: header declares " + std::to_string(info.frames) + " frames, only " +
                   std::to_string(mono.size()) + " decode");
  }
  const double seconds = static_cast<double>(mono.size()) / rate;
  if (seconds < lim.min_seconds) {
    return err(ErrorCode::kOutOfRange, label,
               "is " + fmt_seconds(seconds) + " long, the minimum is " + fmt_seconds(lim.min_seconds));
  }
  if (lim.silence_peak > 0 && peak <= lim.silence_peak) {
    return err(ErrorCode::kInvalidArgument, label, "is silent (peak " + std::to_string(peak) + ")");
  }

  Audio out;
  out.source_sample_rate = rate;
  out.source_channels = channels;
  const int target = opts.target_rate == 0 ? rate : opts.target_rate;
  out.sample_rate = target;
  if (target == rate) {
    out.samples = std::move(mono);
  } else {
    auto res = resample(mono.data(), mono.size(), rate, target);
    if (!res.ok()) return err(res.error().code, label, res.error().message);
    out.samples = std::move(res).value();
    // Finite input and a finite filter give finite output; checked anyway because downstream
    // models would silently turn one NaN into garbage.
    for (float v : out.samples) {
      if (!std::isfinite(v)) return err(ErrorCode::kInternal, label, "resampler produced a non-finite sample");
    }
    // A few source samples can round to none at a lower rate.
    if (out.samples.empty())
      return err(ErrorCode::kInvalidFormat, label, "is too short: no samples remain at " + std::to_string(target) + " Hz");
  }
  return out;
}

Result<std::string> read_stdin(const std::string& label, uint64_t max_bytes) {
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, stdin);
    if (n > 0) {
      if (data.size() + n > max_bytes) {
        return err(ErrorCode::kResourceExhausted, label,
                   "larger than the limit of " + std::to_string(max_bytes) + " bytes");
      }
      data.append(buf, n);
    }
    if (n < sizeof buf) {
      if (std::ferror(stdin)) return err(ErrorCode::kIo, label, std::string("read failed: ") + std::strerror(errno));
      break;
    }
  }
  return data;
}

}  // namespace

Result<Audio> decode_audio(std::string_view bytes, const std::string& label, const ReadOptions& opts) {
  CHORUS_TRY(check_limits(opts));
  if (bytes.empty()) return err(ErrorCode::kInvalidFormat, label, "is empty (0 bytes)");
  if (bytes.size() > opts.limits.max_file_bytes) {
    return err(ErrorCode::kResourceExhausted, label,
               std::to_string(bytes.size()) + " bytes, the limit is " + std::to_string(opts.limits.max_file_bytes));
  }
  CHORUS_TRY(check_format_allowed(sniff_format_family(bytes.substr(0, 16)), opts.limits, label));
  MemoryFile mem{bytes.data(), static_cast<sf_count_t>(bytes.size()), 0};
  SF_VIRTUAL_IO io{mem_length, mem_seek, mem_read, mem_write, mem_tell};
  SF_INFO info{};
  SndfilePtr sf(sf_open_virtual(&io, SFM_READ, &info, &mem));
  if (!sf) return open_error(sf_error(nullptr), sf_strerror(nullptr), label);
  return decode_open_file(sf.get(), info, label, opts);
}

Result<Audio> read_audio(const std::string& path, const ReadOptions& opts) {
  CHORUS_TRY(check_limits(opts));
  if (path == "-") {
    const std::string label = "<stdin>";
    CHORUS_ASSIGN(std::string data, read_stdin(label, opts.limits.max_file_bytes));
    return decode_audio(data, label, opts);
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return err(ErrorCode::kNotFound, path, "audio file not found");
  if (!fs::is_regular_file(st)) return err(ErrorCode::kInvalidArgument, path, "not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return err(ErrorCode::kIo, path, "cannot stat: " + ec.message());
  if (size == 0) return err(ErrorCode::kInvalidFormat, path, "is empty (0 bytes)");
  if (size > opts.limits.max_file_bytes) {
    return err(ErrorCode::kResourceExhausted, path,
               std::to_string(size) + " bytes, the limit is " + std::to_string(opts.limits.max_file_bytes));
  }
  if (opts.limits.allowed_formats != input_format::kAll) {
    char head[16] = {};
    size_t got = 0;
    if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
      got = std::fread(head, 1, sizeof head, f);
      std::fclose(f);
    }
    CHORUS_TRY(check_format_allowed(sniff_format_family(std::string_view(head, got)), opts.limits, path));
  }
  SF_INFO info{};
  SndfilePtr sf(sf_open(path.c_str(), SFM_READ, &info));
  if (!sf) return open_error(sf_error(nullptr), sf_strerror(nullptr), path);
  return decode_open_file(sf.get(), info, path, opts);
}

}  // namespace chorus::audio
