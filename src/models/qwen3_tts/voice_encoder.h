// Reference audio -> a Voice (models/voice/voice_file.h): the x-vector from the Base checkpoint's speaker encoder
// and the reference codes from its codec's speech encoder, both on the same 24 kHz mono signal, as
// the official create_voice_clone_prompt does. Used by `chorus voice create`, `chorus say
// --ref-audio` and anything else that clones a voice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "audio/reader.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "models/codec/speech_encoder.h"
#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/speaker_encoder.h"
#include "models/voice/voice_file.h"

namespace chorus::qwen3_tts {

class VoiceEncoder {
 public:
  // From an opened checkpoint (shares its weights, e.g. those of a loaded Model). The speech
  // encoder is optional: without one (a codec with no encoder weights) only x-vectors can be made.
  // `pool` runs the kernels (nullptr: the calling thread only).
  static Result<VoiceEncoder> from_files(const ModelFiles& files, ThreadPool* pool);
  // Opens and validates the checkpoint folder `dir` first.
  static Result<VoiceEncoder> load(const std::string& dir, ThreadPool* pool);

  int64_t sample_rate() const { return speaker_.sample_rate(); }
  const SpeakerEncoder& speaker_encoder() const { return speaker_; }
  bool has_speech_encoder() const { return speech_.has_value(); }

  // Samples at sample_rate() -> x-vector, plus reference codes when `with_codes` (kNotFound when the
  // codec cannot encode). The Voice has no reference text: the caller adds it.
  Result<voice::Voice> encode(const float* samples, int64_t n, bool with_codes) const;
  // Reads, downmixes and resamples an audio file to sample_rate() (audio::read_audio) first.
  Result<voice::Voice> encode_file(const std::string& path, bool with_codes, const audio::AudioLimits& limits = {}) const;

 private:
  VoiceEncoder(SpeakerEncoder s) : speaker_(std::move(s)) {}
  SpeakerEncoder speaker_;
  std::optional<codec::SpeechEncoder> speech_;
  int64_t codebooks_ = 0;
};

}  // namespace chorus::qwen3_tts
