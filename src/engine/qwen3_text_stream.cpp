#include "engine/qwen3_text_stream.h"

#include <algorithm>

namespace chorus::engine {

namespace q3 = qwen3_tts;

Qwen3TextStream::Qwen3TextStream(std::shared_ptr<const q3::Model> model, q3::PromptInputs in,
                                 q3::GenerationSettings settings, LengthCap cap, std::vector<int32_t> suffix_ids,
                                 std::shared_ptr<TextFeed> feed)
    : model_(std::move(model)),
      in_(std::move(in)),
      settings_(settings),
      cap_(cap),
      suffix_ids_(std::move(suffix_ids)),
      feed_(std::move(feed)) {
  // In-context cloning puts reference text and then target text beside the reference frames
  // (and the bos row) in the prefill; otherwise the prefill holds one target token.
  const bool icl = !in_.xvector_only && !in_.ref_codes.empty();
  if (icl) {
    const int64_t ref_tokens = static_cast<int64_t>(in_.ref_text_ids.size()) - 5;
    const int64_t frames_column = static_cast<int64_t>(in_.ref_codes.size()) + 1;
    prefill_targets_ = std::max<int64_t>(1, frames_column - ref_tokens);
  }
}

StopReason Qwen3TextStream::stop_reason() const {
  if (cancelled_ && !(s_ && s_->finished())) return StopReason::kCancelled;
  if (!s_) return StopReason::kRunning;
  switch (s_->finish_reason()) {
    case q3::FinishReason::kEos: return StopReason::kEos;
    case q3::FinishReason::kMaxFrames: return StopReason::kMaxFrames;
    default: return StopReason::kRunning;
  }
}

int64_t Qwen3TextStream::text_tokens() const {
  if (text_done_) return std::max<int64_t>(0, static_cast<int64_t>(ids_.size()) - kRoleIds - 5);
  return std::max<int64_t>(0, committed_targets());
}

Status Qwen3TextStream::build(bool whole_text) {
  q3::PromptInputs in = in_;
  if (whole_text) {
    in.text_ids = ids_;
  } else {
    // The prefill of the whole text's prompt is that of a text cut after its first
    // prefill_targets_ tokens; only the trailing rows differ, and their last (tts_eos) is held
    // back until the text ends.
    in.text_ids.assign(ids_.begin(), ids_.begin() + kRoleIds + prefill_targets_);
    in.text_ids.insert(in.text_ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  }
  CHORUS_ASSIGN(q3::Prompt prompt, q3::build_prompt(*model_, in));
  if (!prompt.streaming_text)
    return make_error(ErrorCode::kUnsupported, "text in pieces needs the streaming text layout");
  q3::GenerationSettings g = settings_;
  const int64_t room = model_->config().talker.dims.max_positions - prompt.prefill_rows + 1;
  if (room < 1) return make_error(ErrorCode::kOutOfRange, "the prompt is longer than the talker's context");
  g.max_frames = std::min(g.max_frames, room);
  if (whole_text) {
    g.max_frames = std::min(g.max_frames, length_cap_frames(cap_, prompt.text_tokens));
  } else {
    const int64_t H = prompt.hidden;
    eos_row_.assign(prompt.trailing.end() - H, prompt.trailing.end());
    prompt.trailing.resize(prompt.trailing.size() - static_cast<size_t>(H));
    prompt.trailing_rows -= 1;
  }
  CHORUS_ASSIGN(s_, q3::Stream::create(model_, std::move(prompt), g));
  embedded_targets_ = whole_text ? text_tokens() : prefill_targets_;
  closed_ = whole_text;
  return ok_status();
}

Status Qwen3TextStream::embed_new_targets() {
  const int64_t upto = static_cast<int64_t>(ids_.size()) - (text_done_ ? 5 : 0);  // the suffix is no target
  const int64_t from = kRoleIds + embedded_targets_;
  if (upto < from) return make_error(ErrorCode::kInternal, "text stream: the finished text has fewer tokens than were fed");
  if (upto > from) {
    const int64_t H = model_->hidden(), n = upto - from;
    std::vector<float> rows(static_cast<size_t>(n * H));
    CHORUS_TRY(model_->talker().embed_text({ids_.data() + from, static_cast<size_t>(n)}, rows.data(), model_->pool()));
    for (float& v : rows) v += 0.0f;  // as the prompt builder writes a text row with no codec part
    s_->append_trailing(rows.data(), n);
    embedded_targets_ += n;
  }
  if (text_done_) {
    s_->append_trailing(eos_row_.data(), 1);
    CHORUS_TRY(s_->set_max_frames(std::min(s_->settings().max_frames, length_cap_frames(cap_, text_tokens()))));
    closed_ = true;
  }
  return ok_status();
}

q3::Stream* Qwen3TextStream::steppable() {
  if (!s_ || finished()) return nullptr;
  if (closed_) return s_.get();
  // The step feeds trailing row frames(), and a length cap that more text could still raise must
  // not be what stops it.
  if (s_->trailing_rows() > s_->frames() && s_->frames() + 1 < length_cap_frames(cap_, committed_targets()))
    return s_.get();
  return nullptr;
}

Result<bool> Qwen3TextStream::ready() {
  if (finished()) return true;
  if (!closed_) {
    feed_->read(&ids_, &text_done_);
    if (!s_) {
      if (text_done_) {
        CHORUS_TRY(build(true));
      } else if (committed_targets() >= prefill_targets_) {
        CHORUS_TRY(build(false));
      } else {
        return false;
      }
    }
    if (!closed_) CHORUS_TRY(embed_new_targets());
  }
  return steppable() != nullptr;
}

}  // namespace chorus::engine
