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
