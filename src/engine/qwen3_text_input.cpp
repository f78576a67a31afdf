#include "engine/qwen3_text_input.h"

#include <algorithm>

namespace chorus::engine {

namespace q3 = qwen3_tts;

Qwen3TextInput::Qwen3TextInput(std::shared_ptr<const q3::Model> model, q3::PromptInputs in,
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

void Qwen3TextInput::read() {
  if (!text_done_) feed_->read(&ids_, &text_done_);
}

int64_t Qwen3TextInput::text_tokens() const {
  if (text_done_) return std::max<int64_t>(0, static_cast<int64_t>(ids_.size()) - kRoleIds - 5);
  return std::max<int64_t>(0, committed_targets());
}

Result<Qwen3TextInput::Start> Qwen3TextInput::start() {
  if (!can_start()) return make_error(ErrorCode::kInternal, "text stream: started before its first tokens");
  const bool whole_text = text_done_;
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
  Start st;
  CHORUS_ASSIGN(st.prompt, q3::build_prompt(*model_, in));
  q3::Prompt& prompt = st.prompt;
  if (!prompt.streaming_text)
    return make_error(ErrorCode::kUnsupported, "text in pieces needs the streaming text layout");
  st.settings = settings_;
  const int64_t room = model_->config().talker.dims.max_positions - prompt.prefill_rows + 1;
  if (room < 1) return make_error(ErrorCode::kOutOfRange, "the prompt is longer than the talker's context");
  st.settings.max_frames = std::min(st.settings.max_frames, room);
  if (whole_text) {
    st.settings.max_frames = std::min(st.settings.max_frames, length_cap_frames(cap_, prompt.text_tokens));
  } else {
    const int64_t H = prompt.hidden;
    eos_row_.assign(prompt.trailing.end() - H, prompt.trailing.end());
    prompt.trailing.resize(prompt.trailing.size() - static_cast<size_t>(H));
    prompt.trailing_rows -= 1;
  }
  settings_.max_frames = st.settings.max_frames;
  started_ = true;
  embedded_targets_ = whole_text ? text_tokens() : prefill_targets_;
  closed_ = whole_text;
  return st;
}

Result<Qwen3TextInput::Rows> Qwen3TextInput::take_rows() {
  Rows r;
  if (!started_ || closed_) return r;
  const int64_t upto = static_cast<int64_t>(ids_.size()) - (text_done_ ? 5 : 0);  // the suffix is no target
  const int64_t from = kRoleIds + embedded_targets_;
  if (upto < from) return make_error(ErrorCode::kInternal, "text stream: the finished text has fewer tokens than were fed");
  const int64_t H = model_->hidden();
  if (upto > from) {
    r.count = upto - from;
    r.data.resize(static_cast<size_t>(r.count * H));
    CHORUS_TRY(model_->talker().embed_text({ids_.data() + from, static_cast<size_t>(r.count)}, r.data.data(), model_->pool()));
    for (float& v : r.data) v += 0.0f;  // as the prompt builder writes a text row with no codec part
    embedded_targets_ += r.count;
  }
  if (text_done_) {
    r.data.insert(r.data.end(), eos_row_.begin(), eos_row_.end());
    r.count += 1;
    r.closed = true;
    r.cap_frames = std::min(settings_.max_frames, length_cap_frames(cap_, text_tokens()));
    settings_.max_frames = r.cap_frames;
    closed_ = true;
  }
  return r;
}

bool Qwen3TextInput::may_make(int64_t frame, int64_t trailing_rows) const {
  if (!started_) return false;
  if (closed_) return true;
  // The frame feeds trailing row `frame`, and a length cap that more text could still raise must
  // not be what stops it.
  return trailing_rows > frame && frame + 1 < length_cap_frames(cap_, committed_targets());
}

}  // namespace chorus::engine
