// What a family that clones voices offers the engine: reference audio → a Voice (x-vector and/or
// reference codes), and a Voice → the request's voice fields. Encoding runs on the CPU whatever
// the generator's device.
#pragma once

#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/request.h"
#include "models/voice/voice_file.h"

namespace chorus::engine {

class VoiceCloner {
 public:
  virtual ~VoiceCloner() = default;
  // The rate encode_voice expects its samples at.
  virtual int64_t voice_sample_rate() const = 0;
  // Mono samples at voice_sample_rate() → a voice without transcript. `with_codes`: also the
  // reference codes (in-context cloning); families that clone only from codes always make them.
  virtual Result<voice::Voice> encode_voice(const float* samples, int64_t n, bool with_codes) const = 0;
  // Checks that `v` suits the model and fills the request's speaker embedding, reference codes and
  // transcript (`label` names the voice in errors; `note` tells when the clone falls back to the
  // x-vector alone).
  virtual Status apply_voice(const voice::Voice& v, const std::string& label, SynthesisRequest& r,
                             std::string* note) const = 0;
};

}  // namespace chorus::engine
