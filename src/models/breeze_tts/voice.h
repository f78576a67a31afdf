// Breeze TTS 2 voice cloning inputs (breeze_tts2.md §5.2): reference audio → reference codes with
// the checkpoint's codec encoder (audio_tokenizer/, the same 12 Hz speech encoder Qwen3-TTS Base
// models use), kept as a voice file (models/voice/voice_file.h, family "breeze-tts": codes and
// transcript, no x-vector) or used at once. The codes then fill ref_clone_tata / ref_edit_tata.
#pragma once

#include <cstdint>
#include <string>

#include "audio/reader.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/codec/speech_encoder.h"
#include "models/voice/voice_file.h"

namespace chorus::breeze_tts {

// The codec's shape as voice files record it ("12hz-24000-1920-16x2048": input rate, samples per
// frame, codebooks × codebook size). Codes made by one codec suit a model whose codec has the same
// signature; two codecs of the same shape are not told apart.
std::string codec_signature(const codec::CodecConfig& c);

class VoiceEncoder {
 public:
  // The checkpoint's speech encoder; kNotFound when its codec has no encoder weights, kShapeMismatch
  // when the encoder's codebooks are not the model's. `pool` runs the kernels (nullptr: this thread).
  static Result<VoiceEncoder> from_files(const ModelFiles& files, ThreadPool* pool);

  int64_t sample_rate() const { return speech_.sample_rate(); }

  // Mono samples at sample_rate() → a breeze-tts Voice with codes (no transcript: the caller adds
  // it). Errors for no samples or a non-finite one.
  Result<voice::Voice> encode(const float* samples, int64_t n) const;
  // Reads, downmixes and resamples the file first (audio::read_audio with `limits`).
  Result<voice::Voice> encode_file(const std::string& path, const audio::AudioLimits& limits = {}) const;

 private:
  explicit VoiceEncoder(codec::SpeechEncoder s, std::string signature)
      : speech_(std::move(s)), signature_(std::move(signature)) {}
  codec::SpeechEncoder speech_;
  std::string signature_;
};

// Whether `v` suits the model: family breeze-tts, codes of num_codebooks codebooks below the codec
// codebook size, and (when recorded) the same codec signature. `label` names the voice in errors.
Status check_voice_for_model(const voice::Voice& v, const Config& c, const std::string& label);

}  // namespace chorus::breeze_tts
