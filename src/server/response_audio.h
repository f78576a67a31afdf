// A response's audio path, shared by the speech routes: the speed change (when one was asked for)
// and then the streaming encoder. One thread at a time uses it (the response's encoding work).
#pragma once

#include <memory>
#include <vector>

#include "audio/stream_encoder.h"
#include "audio/tempo.h"
#include "core/error.h"

namespace chorus::server {

struct ResponseAudio {
  std::unique_ptr<audio::StreamEncoder> enc;
  std::unique_ptr<audio::TempoStretcher> tempo;  // null at speed 1
  std::vector<float> stretched;

  // One chunk of the model's samples.
  Status write(const float* samples, size_t n) {
    if (!tempo) return enc->write(samples, n);
    stretched.clear();
    tempo->process(samples, n, stretched);
    return enc->write(stretched.data(), stretched.size());
  }
  // The end: what the speed change holds back, then the encoder's tail.
  Status finish() {
    if (tempo) {
      stretched.clear();
      tempo->flush(stretched);
      CHORUS_TRY(enc->write(stretched.data(), stretched.size()));
    }
    return enc->finish();
  }
};

}  // namespace chorus::server
