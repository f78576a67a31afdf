// decode_audio on arbitrary bytes: every input must give audio or an Error, within small limits
// (so forged lengths cannot make the fuzzer itself run out of memory), and accepted audio must obey
// the limits and be finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "audio/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::audio;
  ReadOptions opts;
  opts.limits.min_seconds = 0;
  opts.limits.max_seconds = 2.0;
  opts.limits.min_sample_rate = 4000;
  opts.limits.max_sample_rate = 96000;
  opts.limits.max_file_bytes = 1 << 20;
  // The first byte picks whether the resampler runs too (it is where rates meet arithmetic).
  opts.target_rate = (size > 0 && (data[0] & 1)) ? 16000 : 0;
  auto r = decode_audio(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", opts);
  if (r.ok()) {
    const Audio& a = *r;
    if (a.samples.empty() || a.sample_rate <= 0) std::abort();
    if (a.source_sample_rate < opts.limits.min_sample_rate || a.source_sample_rate > opts.limits.max_sample_rate) std::abort();
    // Resampling rounds the length, so allow a sample of slack above the cap.
    if (static_cast<double>(a.samples.size()) > opts.limits.max_seconds * a.sample_rate + 1) std::abort();
    for (float v : a.samples) {
      if (!std::isfinite(v)) std::abort();
    }
  }
  return 0;
}
