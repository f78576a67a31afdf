// Audio input: any file libsndfile decodes (WAV, AIFF, FLAC, Ogg Vorbis/Opus, MP3, ...) from a path
// or from bytes in memory, returned as mono float at a target rate. Untrusted input: the header's
// channel count, rate and length are checked before anything large is allocated, decoding stops as
// soon as the length cap is crossed (headers can lie), and every sample must be finite.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace chorus::audio {

// Container families, a bitmask for AudioLimits::allowed_formats. Recognised from the first bytes
// before libsndfile sees the input, and again from what libsndfile detected.
namespace input_format {
inline constexpr uint32_t kWav = 1u << 0;    // RIFF/RIFX/RF64/BW64 WAVE, Sony Wave64
inline constexpr uint32_t kFlac = 1u << 1;   // native FLAC
inline constexpr uint32_t kOgg = 1u << 2;    // Ogg: Vorbis, Opus, FLAC-in-Ogg
inline constexpr uint32_t kMp3 = 1u << 3;    // MPEG audio (ID3 tag or frame sync first)
inline constexpr uint32_t kOther = 1u << 4;  // AIFF, AU, CAF, ... anything else libsndfile reads
inline constexpr uint32_t kAll = kWav | kFlac | kOgg | kMp3 | kOther;
}  // namespace input_format

struct AudioLimits {
  double min_seconds = 0.5;    // shorter input is rejected (kOutOfRange); 0 allows any non-empty input
  double max_seconds = 60.0;   // longer input is rejected (kResourceExhausted), checked on the header first
  int max_channels = 16;
  int min_sample_rate = 4000;  // of the source
  int max_sample_rate = 384000;
  uint64_t max_file_bytes = 256ull << 20;  // path and in-memory input alike
  // |sample| above this is treated as a corrupt float file (full scale is 1.0).
  float max_abs_sample = 1000.0f;
  // When > 0, input whose peak |sample| is at or below this is rejected as silent (kInvalidArgument).
  float silence_peak = 0.0f;
  // Others are rejected with kUnsupported before decoding, e.g. a server may take only WAV and
  // FLAC (the lossy decoders are larger attack surface; libsndfile's Ogg path leaks on some
  // malformed streams).
  uint32_t allowed_formats = input_format::kAll;
};

struct ReadOptions {
  int target_rate = 24000;  // 0 keeps the source rate
  AudioLimits limits;
};

struct Audio {
  int sample_rate = 0;
  std::vector<float> samples;  // mono
  int source_sample_rate = 0;
  int source_channels = 0;

  double seconds() const { return sample_rate > 0 ? static_cast<double>(samples.size()) / sample_rate : 0.0; }
};

// Reads `path` ("-" reads standard input). Errors name the file.
Result<Audio> read_audio(const std::string& path, const ReadOptions& opts = {});
// Decodes a whole file held in memory; `label` names it in errors (e.g. "request audio").
Result<Audio> decode_audio(std::string_view bytes, const std::string& label, const ReadOptions& opts = {});

}  // namespace chorus::audio
