// The Qwen3-TTS implementation of the engine interface: maps a SynthesisRequest onto the family's
// prompt inputs (tokenizing and wrapping text as the official wrapper does) and generation settings
// (checkpoint defaults, overrides, stop limits).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/tts_model.h"
#include "models/qwen3_tts/model.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"
#include "text/qwen2_tokenizer.h"

namespace chorus::engine {

class Qwen3TtsEngine final : public TtsModel {
 public:
  static Result<std::unique_ptr<Qwen3TtsEngine>> load(const std::string& dir, ThreadPool* pool,
                                                      WeightFormat weights = WeightFormat::kBf16);

  const ModelInfo& info() const override { return info_; }
  Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& request) const override;
  Status step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const override;

  const qwen3_tts::Model& model() const { return *model_; }

  // The family's prompt inputs and settings for a request (exposed for tests).
  Result<qwen3_tts::PromptInputs> prompt_inputs(const SynthesisRequest& r) const;
  qwen3_tts::GenerationSettings settings(const SynthesisRequest& r) const;  // before the stop limits

 private:
  Result<std::vector<int32_t>> wrap(const std::string& text, const char* prefix, const char* suffix,
                                    const char* what) const;

  std::shared_ptr<const qwen3_tts::Model> model_;
  std::optional<text::Qwen2Tokenizer> tokenizer_;
  std::string tokenizer_error_;  // why there is none
  ModelInfo info_;
};

}  // namespace chorus::engine
