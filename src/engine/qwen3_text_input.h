// The host side of a Qwen3-TTS stream whose text arrives while it runs (streaming text layout),
// shared by the CPU stream (qwen3_text_stream.h) and the GPU engine: it reads the ids a TextFeed
// has released, says when the stream can start and with which prompt, hands out the trailing text
// rows as their tokens arrive, and says whether a frame may be made yet.
//
// The streaming layout puts the first target token(s) in the prefill and feeds the rest one per
// frame: frame k adds trailing row k. So the stream can start once those first tokens exist, and
// frame k needs only row k. Until the text is finished a frame is made only when its row has
// arrived and no length cap that more text could still raise stops it, so every frame is the
// frame a run on the whole text makes: the codes are the same however the text is cut and timed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/text_feed.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"

namespace chorus::engine {

class Qwen3TextInput {
 public:
  // `in` holds everything but the text; `settings` the frame limit before the length cap;
  // `suffix_ids`: the ids the wrapping's suffix tokenizes to.
  Qwen3TextInput(std::shared_ptr<const qwen3_tts::Model> model, qwen3_tts::PromptInputs in,
                 qwen3_tts::GenerationSettings settings, LengthCap cap, std::vector<int32_t> suffix_ids,
                 std::shared_ptr<TextFeed> feed);

  const std::shared_ptr<TextFeed>& feed() const { return feed_; }
  const qwen3_tts::GenerationSettings& settings() const { return settings_; }

  // Takes in the ids the feed has released since the last call.
  void read();
  // Whether start() may be called: the prefill's target tokens have arrived, or the whole text.
  bool can_start() const { return !started_ && (text_done_ || committed_targets() >= prefill_targets_); }

  struct Start {
    qwen3_tts::Prompt prompt;
    qwen3_tts::GenerationSettings settings;
  };
  // The prompt and settings the stream starts with (once). With the text finished, those of the
  // whole text. Otherwise the prompt of the text cut after its prefill tokens, whose prefill is the
  // whole text's, without its last trailing row (tts_eos, held back until the text ends), and the
  // frame limit before the length cap.
  Result<Start> start();

  struct Rows {
    std::vector<float> data;  // [count, hidden]
    int64_t count = 0;
    // The text is finished and every row is out (the last one, tts_eos, included): the frame
    // limit is then cap_frames at most.
    bool closed = false;
    int64_t cap_frames = 0;
  };
  // The trailing rows whose tokens arrived since start() or the last call, in order.
  Result<Rows> take_rows();

  bool started() const { return started_; }
  // Every row and the final frame limit have been handed out.
  bool closed() const { return closed_; }
  // Whether a stream holding `trailing_rows` rows may make its frame number `frame` (0-based).
  bool may_make(int64_t frame, int64_t trailing_rows) const;
  // Of the target text: all of it once finished, else the tokens read so far.
  int64_t text_tokens() const;

 private:
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
  int64_t prefill_targets_ = 1;   // target tokens the streaming prefill takes
  bool started_ = false;
  int64_t embedded_targets_ = 0;  // target tokens whose rows are out (in the prefill or handed out)
  bool closed_ = false;
  std::vector<float> eos_row_;    // TextEmb(tts_eos), the row after the last target token
};

}  // namespace chorus::engine
