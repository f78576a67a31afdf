#include "models/qwen3_tts/stream.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace chorus::qwen3_tts {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The official talker may emit only codebook-0 codes and EOS: it suppresses the top 1024 ids of the
// codec vocabulary (control, language and speaker ids) except EOS (spec §2.7).
int64_t talker_allowed_below(const TalkerConfig& tc) { return std::max<int64_t>(0, tc.codec_vocab - 1024); }

}  // namespace

Result<std::unique_ptr<Stream>> Stream::create(std::shared_ptr<const Model> model, Prompt prompt,
                                               const GenerationSettings& settings) {
  if (!model) return make_error(ErrorCode::kInternal, "stream: no model");
  if (prompt.hidden != model->hidden() || prompt.prefill_rows < 1 ||
      static_cast<int64_t>(prompt.prefill.size()) != prompt.prefill_rows * prompt.hidden ||
      static_cast<int64_t>(prompt.trailing.size()) != prompt.trailing_rows * prompt.hidden ||
      static_cast<int64_t>(prompt.pad.size()) != prompt.hidden)
    return make_error(ErrorCode::kInternal, "stream: the prompt was not built for this model");
  CHORUS_TRY(sampling::validate(settings.talker, "talker sampler"));
  CHORUS_TRY(sampling::validate(settings.code_predictor, "code predictor sampler"));
  if (settings.max_frames < 1) return make_error(ErrorCode::kInvalidArgument, "max frames must be at least 1");
  if (settings.min_frames < 0) return make_error(ErrorCode::kInvalidArgument, "min frames must be >= 0");
  const int64_t positions = prompt.prefill_rows + settings.max_frames - 1;  // the last frame is never fed back
  if (positions > model->config().talker.dims.max_positions)
    return make_error(ErrorCode::kOutOfRange, "a prompt of " + std::to_string(prompt.prefill_rows) + " rows plus " +
                                                  std::to_string(settings.max_frames) + " frames exceeds the talker's " +
                                                  std::to_string(model->config().talker.dims.max_positions) + " positions");
  std::unique_ptr<Stream> s(new Stream());
  s->model_ = std::move(model);
  s->settings_ = settings;
  s->prompt_rows_ = prompt.prefill_rows;
  s->prompt_ = std::move(prompt);
  s->talker_cache_ = s->model_->talker().make_cache();
  s->cp_cache_ = s->model_->code_predictor().make_cache();
  s->hidden_.assign(static_cast<size_t>(s->model_->hidden()), 0.0f);
  return s;
}

size_t Stream::state_bytes() const {
  return talker_cache_.bytes() + cp_cache_.bytes() +
         (prompt_.prefill.capacity() + prompt_.trailing.capacity() + hidden_.capacity()) * sizeof(float);
}

void Stream::append_trailing(const float* rows, int64_t n) {
  prompt_.trailing.insert(prompt_.trailing.end(), rows, rows + n * prompt_.hidden);
  prompt_.trailing_rows += n;
}

Status Stream::set_max_frames(int64_t max_frames) {
  if (max_frames <= frames_ || max_frames < 1)
    return make_error(ErrorCode::kInternal, "stream: a frame limit at or below the frames already made");
  if (prompt_rows_ + max_frames - 1 > model_->config().talker.dims.max_positions)
    return make_error(ErrorCode::kOutOfRange, "stream: the frame limit exceeds the talker's positions");
  settings_.max_frames = max_frames;
  return ok_status();
}

struct StepRunner {
  // Samples codebook 0 of frame s.frames_ from talker logits; ends the stream on EOS.
  static Status take_c0(Stream& s, float* logits) {
    const TalkerConfig& tc = s.model_->config().talker;
    const int32_t eos = static_cast<int32_t>(tc.codec_eos_id);
    sampling::LogitRules rules;
    rules.penalized = s.c0_history_;
    rules.allowed_below = talker_allowed_below(tc);
    rules.also_allowed = {&eos, 1};
    if (s.frames_ < s.settings_.min_frames) rules.blocked = {&eos, 1};
    const sampling::DrawAddress at{s.settings_.seed, s.settings_.rng_stream, static_cast<uint32_t>(s.frames_), 0, 0};
    CHORUS_ASSIGN(const int32_t c0, sampling::sample({logits, static_cast<size_t>(tc.codec_vocab)}, rules,
                                                     s.settings_.talker, at));
    if (c0 == eos) {
      s.reason_ = FinishReason::kEos;
      return ok_status();
    }
    s.pending_c0_ = c0;
    s.c0_history_.push_back(c0);
    return ok_status();
  }

  // Up to `budget` prompt rows of the streams in `ss`, in order; a stream whose last rows are in
  // gets its frame-0 hidden state and codebook 0.
  static Status prefill(const Model& m, std::span<Stream* const> ss, int64_t budget, StepTimes* times) {
    if (ss.empty()) return ok_status();
    const int64_t H = m.hidden(), V = m.config().talker.codec_vocab;
    auto t0 = Clock::now();
    std::vector<nn::SequenceRows> seqs;
    std::vector<Stream*> took;
    std::vector<float> x;
    for (Stream* s : ss) {
      if (budget <= 0) break;
      const int64_t n = std::min(s->prompt_rows_ - s->prefilled_rows_, budget);
      seqs.push_back({&s->talker_cache_, s->prefilled_rows_, n});
      const auto rows = s->prompt_.prefill.begin() + s->prefilled_rows_ * H;
      x.insert(x.end(), rows, rows + n * H);
      took.push_back(s);
      budget -= n;
    }
    std::vector<float> hidden(took.size() * H), logits(took.size() * V);
    CHORUS_TRY(m.talker().forward(seqs, x.data(), hidden.data(), logits.data(), m.pool()));
    if (times) times->talker_prefill_s += seconds_since(t0);
    t0 = Clock::now();
    for (size_t i = 0; i < took.size(); ++i) {
      Stream& s = *took[i];
      s.prefilled_rows_ += seqs[i].rows;
      if (!s.prefilled()) continue;
      std::vector<float>().swap(s.prompt_.prefill);
      std::copy(hidden.data() + i * H, hidden.data() + (i + 1) * H, s.hidden_.data());
      CHORUS_TRY(take_c0(s, logits.data() + i * V));
    }
    if (times) times->talker_sampling_s += seconds_since(t0);
    return ok_status();
  }

  // Codebooks 1..G−1 of the pending frame of every stream.
  static Status predict_codes(const Model& m, std::span<Stream* const> ss, std::vector<std::vector<int32_t>>& codes,
                              StepTimes* times) {
    const int64_t H = m.hidden(), G = m.groups();
    const size_t S = ss.size();
    auto t0 = Clock::now();
    codes.assign(S, std::vector<int32_t>(static_cast<size_t>(G), 0));
    std::vector<float> first_rows(2 * S * H, 0.0f);
    std::vector<FrameWalk> walks(S);
    for (size_t i = 0; i < S; ++i) {
      Stream& s = *ss[i];
      float* rows = first_rows.data() + 2 * i * H;
      std::copy(s.hidden_.begin(), s.hidden_.end(), rows);
      m.talker().add_codec_row(s.pending_c0_, rows + H);
      codes[i][0] = s.pending_c0_;
      walks[i].cache = &s.cp_cache_;
      walks[i].first_rows = rows;
      walks[i].params = s.settings_.code_predictor;
      walks[i].address = {s.settings_.seed, s.settings_.rng_stream, static_cast<uint32_t>(s.frames_), 0, 0};
      walks[i].codes = codes[i].data();
    }
    CHORUS_TRY(m.code_predictor().walk(walks, m.pool()));
    if (times) times->code_predictor_s += seconds_since(t0);
    return ok_status();
  }

  // Feeds each stream's newest frame to the talker and samples the next c0.
  static Status feed(const Model& m, std::span<Stream* const> ss, const std::vector<const std::vector<int32_t>*>& frames,
                     StepTimes* times) {
    if (ss.empty()) return ok_status();
    const int64_t H = m.hidden(), V = m.config().talker.codec_vocab;
    const size_t S = ss.size();
    auto t0 = Clock::now();
    std::vector<float> x(S * H), hidden(S * H), logits(S * V);
    std::vector<nn::SequenceRows> seqs(S);
    for (size_t i = 0; i < S; ++i) {
      Stream& s = *ss[i];
      const int64_t k = s.frames_ - 1;  // index of the frame being fed
      float* row = x.data() + i * H;
      CHORUS_TRY(m.frame_embedding(*frames[i], row));
      const float* text = k < s.prompt_.trailing_rows ? s.prompt_.trailing.data() + k * H : s.prompt_.pad.data();
      for (int64_t j = 0; j < H; ++j) row[j] += text[j];
      seqs[i] = {&s.talker_cache_, s.prompt_rows_ + k, 1};
    }
    CHORUS_TRY(m.talker().forward(seqs, x.data(), hidden.data(), logits.data(), m.pool()));
    if (times) times->talker_step_s += seconds_since(t0);
    t0 = Clock::now();
    for (size_t i = 0; i < S; ++i) {
      Stream& s = *ss[i];
      std::copy(hidden.data() + i * H, hidden.data() + (i + 1) * H, s.hidden_.data());
      CHORUS_TRY(take_c0(s, logits.data() + i * V));
    }
    if (times) times->talker_sampling_s += seconds_since(t0);
    return ok_status();
  }

  static Status step(std::span<Stream* const> streams, std::span<FrameOutput> out, StepTimes* times,
                     const StepOptions& options) {
    if (out.size() != streams.size()) return make_error(ErrorCode::kInternal, "step: one output per stream");
    if (streams.empty()) return ok_status();
    const Model* model = nullptr;
    for (Stream* s : streams) {
      if (!s) return make_error(ErrorCode::kInternal, "step: null stream");
      if (model && &s->model() != model) return make_error(ErrorCode::kInvalidArgument, "step: streams of different models");
      model = &s->model();
    }
    std::vector<Stream*> sorted(streams.begin(), streams.end());
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      return make_error(ErrorCode::kInvalidArgument, "step: a stream appears twice in one batch");
    for (FrameOutput& o : out) {
      o.has_frame = false;
      o.codes.clear();
    }
    std::vector<Stream*> to_prefill;
    bool speaking = false;
    for (Stream* s : streams) {
      if (s->finished()) continue;
      if (s->prefilled()) speaking = true;
      else to_prefill.push_back(s);
    }
    CHORUS_TRY(prefill(*model, to_prefill, speaking ? options.prefill_rows : std::numeric_limits<int64_t>::max(),
                       times));

    std::vector<Stream*> active;
    std::vector<size_t> slot;
    for (size_t i = 0; i < streams.size(); ++i)
      if (!streams[i]->finished() && streams[i]->prefilled()) {
        active.push_back(streams[i]);
        slot.push_back(i);
      }
    if (active.empty()) return ok_status();
    std::vector<std::vector<int32_t>> codes;
    CHORUS_TRY(predict_codes(*model, active, codes, times));

    std::vector<Stream*> to_feed;
    std::vector<const std::vector<int32_t>*> fed;
    for (size_t a = 0; a < active.size(); ++a) {
      Stream& s = *active[a];
      FrameOutput& o = out[slot[a]];
      o.has_frame = true;
      o.codes = codes[a];
      s.frames_ += 1;
      if (s.frames_ >= s.settings_.max_frames) {
        s.reason_ = FinishReason::kMaxFrames;  // the official loop's last c0 would have no frame
      } else {
        to_feed.push_back(&s);
        fed.push_back(&o.codes);
      }
    }
    return feed(*model, to_feed, fed, times);
  }
};

Status step_streams(std::span<Stream* const> streams, std::span<FrameOutput> out, StepTimes* times,
                    const StepOptions& options) {
  if (options.prefill_rows < 1) return make_error(ErrorCode::kInvalidArgument, "step: prefill rows per step must be >= 1");
  return StepRunner::step(streams, out, times, options);
}

}  // namespace chorus::qwen3_tts
