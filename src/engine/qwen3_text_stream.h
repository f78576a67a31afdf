// A Qwen3-TTS stream whose text arrives while it runs (streaming text layout), on the CPU: a
// qwen3_tts::Stream started, fed its trailing text rows and given its final frame limit by a
// Qwen3TextInput (qwen3_text_input.h), which also says when it may step.
#pragma once

#include <memory>

#include "engine/qwen3_text_input.h"
#include "engine/tts_model.h"
#include "models/qwen3_tts/stream.h"

namespace chorus::engine {

class Qwen3TextStream final : public TtsStream {
 public:
  Qwen3TextStream(std::shared_ptr<const qwen3_tts::Model> model, std::unique_ptr<Qwen3TextInput> input);

  bool finished() const override { return cancelled_ || (s_ && s_->finished()); }
  StopReason stop_reason() const override;
  int64_t frames() const override { return s_ ? s_->frames() : 0; }
  int64_t max_frames() const override { return s_ ? s_->settings().max_frames : input_->settings().max_frames; }
  int64_t text_tokens() const override { return input_->text_tokens(); }
  int64_t prompt_rows() const override { return s_ ? s_->prompt_rows() : 0; }
  size_t state_bytes() const override { return s_ ? s_->state_bytes() : 0; }
  void cancel() override { cancelled_ = true; }
  Result<bool> ready() override;

  // The stream to step now, or nullptr when it must wait (or is finished).
  qwen3_tts::Stream* steppable();

 private:
  std::shared_ptr<const qwen3_tts::Model> model_;
  std::unique_ptr<Qwen3TextInput> input_;
  std::unique_ptr<qwen3_tts::Stream> s_;
  bool cancelled_ = false;
};

}  // namespace chorus::engine
