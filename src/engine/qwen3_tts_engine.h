// The Qwen3-TTS implementation of the engine interface: maps a SynthesisRequest onto the family's
// prompt inputs (tokenizing and wrapping text as the official wrapper does) and generation settings
// (checkpoint defaults, overrides, stop limits).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engine/family_engine.h"
#include "engine/qwen3_text_input.h"
#include "models/qwen3_tts/model.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"
#include "models/qwen3_tts/voice_encoder.h"
#include "text/qwen2_tokenizer.h"

namespace chorus::engine {

class Qwen3TtsEngine final : public FamilyEngine {
 public:
  static Result<std::unique_ptr<Qwen3TtsEngine>> load(const std::string& dir, ThreadPool* pool,
                                                      WeightFormat weights = WeightFormat::kBf16);

  // Base checkpoints clone voices (x-vector, plus reference codes for in-context cloning).
  const VoiceCloner* voice_cloner() const override;
  int64_t voice_sample_rate() const override;
  Result<voice::Voice> encode_voice(const float* samples, int64_t n, bool with_codes) const override;
  Status apply_voice(const voice::Voice& v, const std::string& label, SynthesisRequest& r,
                     std::string* note) const override;
  Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& request) const override;
  // Streaming text layout only (TextLayout::kStreaming, or the default of a Base checkpoint).
  Result<std::unique_ptr<TtsStream>> create_text_stream(const SynthesisRequest& request,
                                                        std::shared_ptr<TextFeed>* feed) const override;
  Status step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const override;

  const qwen3_tts::Model& model() const { return *model_; }

  // The host side of a stream whose text arrives in pieces (create_text_stream, and the GPU
  // engine's): the request checked (all but its text), and the feed that takes the text.
  Result<std::unique_ptr<Qwen3TextInput>> text_input(const SynthesisRequest& r) const;

  // The family's prompt inputs and settings for a request (exposed for tests).
  Result<qwen3_tts::PromptInputs> prompt_inputs(const SynthesisRequest& r) const;
  qwen3_tts::GenerationSettings settings(const SynthesisRequest& r) const;  // before the stop limits

 private:
  Result<std::vector<int32_t>> wrap(const std::string& text, const char* prefix, const char* suffix,
                                    const char* what) const;

  Result<const qwen3_tts::VoiceEncoder*> voice_encoder() const;

  std::shared_ptr<const qwen3_tts::Model> model_;
  // Made at the first use (most requests never clone); guarded by voice_mu_.
  mutable std::mutex voice_mu_;
  mutable std::unique_ptr<qwen3_tts::VoiceEncoder> voice_encoder_;
  std::optional<text::Qwen2Tokenizer> tokenizer_;
  std::string tokenizer_error_;  // why there is none
};

}  // namespace chorus::engine
