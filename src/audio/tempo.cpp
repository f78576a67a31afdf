#include "audio/tempo.h"

#include <SoundTouch.h>

#include <algorithm>
#include <cmath>

namespace chorus::audio {

static_assert(std::is_same_v<soundtouch::SAMPLETYPE, float>, "SoundTouch must be built with float samples");

Result<std::unique_ptr<TempoStretcher>> TempoStretcher::create(int sample_rate, double speed) {
  if (!std::isfinite(speed) || speed < 0.25 || speed > 4.0)
    return make_error(ErrorCode::kOutOfRange, "speed must be between 0.25 and 4.0");
  if (sample_rate < 8000 || sample_rate > 192000)
    return make_error(ErrorCode::kInvalidArgument, "tempo: sample rate out of range");
  std::unique_ptr<TempoStretcher> t(new TempoStretcher());
  t->st_ = std::make_unique<soundtouch::SoundTouch>();
  t->st_->setSampleRate(static_cast<unsigned>(sample_rate));
  t->st_->setChannels(1);
  t->st_->setTempo(speed);
  return t;
}

TempoStretcher::~TempoStretcher() = default;

void TempoStretcher::drain(std::vector<float>& out) {
  float buf[4096];
  for (;;) {
    const unsigned got = st_->receiveSamples(buf, 4096);
    if (got == 0) break;
    out.insert(out.end(), buf, buf + got);
  }
}

void TempoStretcher::process(const float* samples, size_t n, std::vector<float>& out) {
  constexpr size_t kBlock = 1 << 14;
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = std::min(kBlock, n - off);
    st_->putSamples(samples + off, static_cast<unsigned>(m));
    drain(out);
  }
}

void TempoStretcher::flush(std::vector<float>& out) {
  st_->flush();
  drain(out);
}

}  // namespace chorus::audio
