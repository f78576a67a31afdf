// Sample-rate conversion with libsoxr (high quality: 20-bit, linear phase, <=0.01 dB roll-off).
// One-shot for whole signals held in memory (reference audio) and a streaming resampler for output
// produced block by block.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/error.h"

struct soxr;  // libsoxr's handle, kept out of this header

namespace chorus::audio {

// Rates accepted by the resamplers; anything outside is a caller bug or a forged header.
inline constexpr int kMinSampleRate = 1000;
inline constexpr int kMaxSampleRate = 768000;

// Mono: n samples at from_rate -> round(n * to_rate / from_rate) samples at to_rate.
// Equal rates return a copy. The output length is exact so callers can rely on it.
Result<std::vector<float>> resample(const float* in, size_t n, int from_rate, int to_rate);

// Mono streaming resampler. Output of successive process() calls followed by flush() equals the
// one-shot conversion of the concatenated input (apart from the final length rounding, which only
// resample() pins).
class StreamResampler {
 public:
  static Result<StreamResampler> create(int from_rate, int to_rate);

  StreamResampler(StreamResampler&&) noexcept;
  StreamResampler& operator=(StreamResampler&&) noexcept;
  ~StreamResampler();

  // Appends to `out` whatever output the new input makes available (possibly nothing yet: the
  // filter needs look-ahead).
  Status process(const float* in, size_t n, std::vector<float>& out);
  // End of input: appends the remaining output. The resampler can then be reused for a new signal.
  Status flush(std::vector<float>& out);

  int from_rate() const { return from_rate_; }
  int to_rate() const { return to_rate_; }
  bool passthrough() const { return from_rate_ == to_rate_; }

 private:
  struct SoxrDeleter {
    void operator()(soxr* s) const;
  };
  StreamResampler(int from_rate, int to_rate, soxr* s) : from_rate_(from_rate), to_rate_(to_rate), soxr_(s) {}

  int from_rate_ = 0;
  int to_rate_ = 0;
  std::unique_ptr<soxr, SoxrDeleter> soxr_;  // null when passthrough
};

}  // namespace chorus::audio
