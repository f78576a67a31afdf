// A Qwen3-TTS stream whose text arrives while it runs (streaming text layout, CPU). The streaming
// layout puts the first target token(s) in the prefill and feeds the rest one per frame, so the
// stream can start once those exist, and each later frame needs just its own text row. Until the
// text is finished the stream only ever steps when the row its next frame feeds has arrived and
// no length cap that more text could still raise stops it, so every step is the step a run on the
// whole text takes: the codes are the same however the text is cut and timed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/text_feed.h"
#include "engine/tts_model.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"

namespace chorus::engine {

class Qwen3TextStream final : public TtsStream {
 public:
  // `in` holds everything but the text; `settings` the frame limit before the length cap;
  // `suffix_ids`: the ids the wrapping's suffix tokenizes to.
  Qwen3TextStream(std::shared_ptr<const qwen3_tts::Model> model, qwen3_tts::PromptInputs in,
                  qwen3_tts::GenerationSettings settings, LengthCap cap, std::vector<int32_t> suffix_ids,
                  std::shared_ptr<TextFeed> feed);

  bool finished() const override { return cancelled_ || (s_ && s_->finished()); }
  StopReason stop_reason() const override;
  int64_t frames() const override { return s_ ? s_->frames() : 0; }
  int64_t max_frames() const override { return s_ ? s_->settings().max_frames : settings_.max_frames; }
  int64_t text_tokens() const override;
  int64_t prompt_rows() const override { return s_ ? s_->prompt_rows() : 0; }
  size_t state_bytes() const override { return s_ ? s_->state_bytes() : 0; }
  void cancel() override { cancelled_ = true; }
  Result<bool> ready() override;

  // The stream to step now, or nullptr when it must wait (or is finished).
  qwen3_tts::Stream* steppable();

 private:
  Status build(bool whole_text);
  Status embed_new_targets();
  int64_t committed_targets() const { return static_cast<int64_t>(ids_.size()) - kRoleIds; }

  static constexpr int64_t kRoleIds = 3;  // <|im_start|> assistant \n

  std::shared_ptr<const qwen3_tts::Model> model_;
  qwen3_tts::PromptInputs in_;
  qwen3_tts::GenerationSettings settings_;
  LengthCap cap_;
  std::vector<int32_t> suffix_ids_;
  std::shared_ptr<TextFeed> feed_;
  std::vector<int32_t> ids_;  // wrapped ids read so far
  bool text_done_ = false;
  int64_t prefill_targets_ = 1;  // target tokens the streaming prefill takes
  std::unique_ptr<qwen3_tts::Stream> s_;
  int64_t embedded_targets_ = 0;  // target tokens whose rows the stream holds
  bool closed_ = false;           // every row and the final frame limit are in
  bool cancelled_ = false;
  std::vector<float> eos_row_;    // TextEmb(tts_eos), the row after the last target token
};

}  // namespace chorus::engine
