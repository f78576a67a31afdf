// Speed change with the pitch kept (SoundTouch's time stretch), streamed: samples in, fewer or more
// samples out, the same voice. Used for the speech API's `speed` (0.25 .. 4.0).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/error.h"

namespace soundtouch {
class SoundTouch;
}

namespace chorus::audio {

class TempoStretcher {
 public:
  // `speed` > 1 is faster (shorter audio); must lie in [0.25, 4].
  static Result<std::unique_ptr<TempoStretcher>> create(int sample_rate, double speed);
  ~TempoStretcher();
  TempoStretcher(const TempoStretcher&) = delete;
  TempoStretcher& operator=(const TempoStretcher&) = delete;

  // Appends what is ready to `out` (mono).
  void process(const float* samples, size_t n, std::vector<float>& out);
  // The tail held back for the stretch window; call once at the end.
  void flush(std::vector<float>& out);

 private:
  TempoStretcher() = default;
  void drain(std::vector<float>& out);
  std::unique_ptr<soundtouch::SoundTouch> st_;
};

}  // namespace chorus::audio
