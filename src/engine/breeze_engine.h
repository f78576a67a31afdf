// The Breeze TTS 2 implementation of the engine interface: maps a SynthesisRequest onto the
// family's prompt parts (plain, clone = reference codes + transcript, design = instruction,
// direction = both) and generation parameters (checkpoint defaults, overrides, guidance, limits).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "audio/reader.h"
#include "engine/family_engine.h"
#include "models/breeze_tts/generation.h"
#include "models/voice/voice_file.h"
#include "text/sentencepiece_tokenizer.h"

namespace chorus::engine {

class BreezeEngine final : public FamilyEngine {
 public:
  static Result<std::unique_ptr<BreezeEngine>> load(const std::string& dir, ThreadPool* pool,
                                                    WeightFormat weights = WeightFormat::kBf16);

  const VoiceCloner* voice_cloner() const override { return this; }
  int64_t voice_sample_rate() const override;
  // Breeze clones from reference codes and their transcript: the codes are always made.
  Result<voice::Voice> encode_voice(const float* samples, int64_t n, bool with_codes) const override;
  Status apply_voice(const voice::Voice& v, const std::string& label, SynthesisRequest& r,
                     std::string* note) const override {
    return apply_voice(v, label, r);
  }
  Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& request) const override;
  Status step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const override;

  // Voice cloning from audio: reference audio → a breeze-tts Voice (codes, no transcript) through
  // the checkpoint's codec encoder (breeze_tts/voice.h).
  Result<voice::Voice> encode_voice(const std::string& audio_path, const audio::AudioLimits& limits) const;
  // Fills the request's reference codes, and its transcript when the voice holds one (giving one in
  // the request too is an error), after checking the voice suits this model.
  Status apply_voice(const voice::Voice& v, const std::string& label, SynthesisRequest& r) const;

  const breeze_tts::ModelFiles& files() const { return *files_; }

  // The family's prompt parts and parameters for a request (exposed for tests).
  Result<breeze_tts::PromptParts> prompt_parts(const SynthesisRequest& r) const;
  Result<breeze_tts::GenerationParams> params(const SynthesisRequest& r, const breeze_tts::PromptParts& parts) const;
  // The loaded stages and files (the CUDA engine builds its prompts with them).
  const breeze_tts::BreezeModel& model() const { return *model_; }

 private:
  Result<std::vector<int32_t>> ids_of(const std::string& s, const std::vector<int32_t>& ids, const char* what) const;

  std::unique_ptr<breeze_tts::ModelFiles> files_;  // the checkpoints the model's tensors point into
  std::unique_ptr<breeze_tts::BreezeModel> model_;
  std::optional<text::SentencePieceTokenizer> tokenizer_;
  ThreadPool* pool_ = nullptr;
};

}  // namespace chorus::engine
