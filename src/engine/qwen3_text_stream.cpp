#include "engine/qwen3_text_stream.h"

#include <algorithm>

namespace chorus::engine {

namespace q3 = qwen3_tts;

Qwen3TextStream::Qwen3TextStream(std::shared_ptr<const q3::Model> model, std::unique_ptr<Qwen3TextInput> input)
    : model_(std::move(model)), input_(std::move(input)) {}

StopReason Qwen3TextStream::stop_reason() const {
  if (cancelled_ && !(s_ && s_->finished())) return StopReason::kCancelled;
  if (!s_) return StopReason::kRunning;
  switch (s_->finish_reason()) {
    case q3::FinishReason::kEos: return StopReason::kEos;
    case q3::FinishReason::kMaxFrames: return StopReason::kMaxFrames;
    default: return StopReason::kRunning;
  }
}

q3::Stream* Qwen3TextStream::steppable() {
  if (!s_ || finished()) return nullptr;
  return input_->may_make(s_->frames(), s_->trailing_rows()) ? s_.get() : nullptr;
}

Result<bool> Qwen3TextStream::ready() {
  if (finished()) return true;
  if (!input_->closed()) {
    input_->read();
    if (!s_) {
      if (!input_->can_start()) return false;
      CHORUS_ASSIGN(Qwen3TextInput::Start st, input_->start());
      CHORUS_ASSIGN(s_, q3::Stream::create(model_, std::move(st.prompt), st.settings));
    }
    CHORUS_ASSIGN(Qwen3TextInput::Rows rows, input_->take_rows());
    if (rows.count > 0) s_->append_trailing(rows.data.data(), rows.count);
    if (rows.closed) CHORUS_TRY(s_->set_max_frames(std::min(s_->settings().max_frames, rows.cap_frames)));
  }
  return steppable() != nullptr;
}

}  // namespace chorus::engine
