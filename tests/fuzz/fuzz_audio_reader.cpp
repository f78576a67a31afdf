// decode_audio on arbitrary bytes: every input must give audio or an Error, within small limits
// (so forged lengths cannot make the fuzzer itself run out of memory), and accepted audio must obey
// the limits and be finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "audio/reader.h"

// libsndfile's Ogg Vorbis open path leaks the codec's state on some malformed streams (a
// third-party bug, see docs/audio.md). Leaks with a decoder library on the allocation stack are
// not reported so the fuzzer keeps looking for our own bugs; leaks of our code still are.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libvorbis.so\nleak:libogg.so\nleak:libopus.so\nleak:libFLAC.so\nleak:libmpg123.so\n"
         "leak:libmp3lame.so\nleak:libsndfile.so\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::audio;
  ReadOptions opts;
  opts.limits.min_seconds = 0;
  opts.limits.max_seconds = 2.0;
  opts.limits.min_sample_rate = 4000;
  opts.limits.max_sample_rate = 96000;
  opts.limits.max_file_bytes = 1 << 20;
  // Bits of the last byte pick whether the resampler runs too (it is where rates meet arithmetic)
  // and whether the format allow-list is on (magic-number sniffing).
  const uint8_t knobs = size > 0 ? data[size - 1] : 0;
  opts.target_rate = (knobs & 1) ? 16000 : 0;
  if (knobs & 2) opts.limits.allowed_formats = input_format::kWav | input_format::kFlac;
  auto r = decode_audio(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", opts);
  if (r.ok()) {
    const Audio& a = *r;
    if (a.samples.empty() || a.sample_rate <= 0) std::abort();
    if (opts.limits.allowed_formats != input_format::kAll && size >= 4 && data[0] == 'O' && data[1] == 'g') std::abort();
    if (a.source_sample_rate < opts.limits.min_sample_rate || a.source_sample_rate > opts.limits.max_sample_rate) std::abort();
    // Resampling rounds the length, so allow a sample of slack above the cap.
    if (static_cast<double>(a.samples.size()) > opts.limits.max_seconds * a.sample_rate + 1) std::abort();
    for (float v : a.samples) {
      if (!std::isfinite(v)) std::abort();
    }
  }
  return 0;
}
