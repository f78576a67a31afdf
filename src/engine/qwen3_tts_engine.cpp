#include "engine/qwen3_tts_engine.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "engine/qwen3_text_stream.h"
#include "engine/sampler_overrides.h"
#include "models/qwen3_tts/voice_check.h"

namespace chorus::engine {

namespace {

namespace q3 = qwen3_tts;

Error bad(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

bool has_tokenizer_files(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  return fs::exists(d / "tokenizer.json") || (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"));
}

class Qwen3Stream final : public TtsStream {
 public:
  Qwen3Stream(std::unique_ptr<q3::Stream> s, int64_t text_tokens) : s_(std::move(s)), text_tokens_(text_tokens) {}
  bool finished() const override { return cancelled_ || s_->finished(); }
  StopReason stop_reason() const override {
    if (cancelled_ && !s_->finished()) return StopReason::kCancelled;
    switch (s_->finish_reason()) {
      case q3::FinishReason::kEos: return StopReason::kEos;
      case q3::FinishReason::kMaxFrames: return StopReason::kMaxFrames;
      default: return StopReason::kRunning;
    }
  }
  int64_t frames() const override { return s_->frames(); }
  int64_t max_frames() const override { return s_->settings().max_frames; }
  int64_t text_tokens() const override { return text_tokens_; }
  int64_t prompt_rows() const override { return s_->prompt_rows(); }
  size_t state_bytes() const override { return s_->state_bytes(); }
  void cancel() override { cancelled_ = true; }
  q3::Stream* impl() { return s_.get(); }

 private:
  std::unique_ptr<q3::Stream> s_;
  bool cancelled_ = false;
  int64_t text_tokens_;
};


}  // namespace

int64_t length_cap_frames(const LengthCap& cap, int64_t text_tokens) {
  if (!(cap.frames_per_token > 0)) return std::numeric_limits<int64_t>::max();
  const double frames = cap.frames_per_token * static_cast<double>(std::max<int64_t>(0, text_tokens)) +
                        static_cast<double>(std::max<int64_t>(0, cap.slack_frames));
  return frames >= 9.0e18 ? std::numeric_limits<int64_t>::max() : std::max<int64_t>(1, static_cast<int64_t>(frames));
}

Result<std::unique_ptr<Qwen3TtsEngine>> Qwen3TtsEngine::load(const std::string& dir, ThreadPool* pool,
                                                            WeightFormat weights) {
  std::unique_ptr<Qwen3TtsEngine> e(new Qwen3TtsEngine());
  CHORUS_ASSIGN(e->model_, q3::Model::load(dir, pool, weights));
  if (has_tokenizer_files(dir)) {
    auto tok = text::Qwen2Tokenizer::load(dir);
    if (tok.ok()) e->tokenizer_ = std::move(*tok);
    else e->tokenizer_error_ = "its text tokenizer failed to load: " + tok.error().to_string();
  } else {
    e->tokenizer_error_ = "it has no text tokenizer (vocab.json + merges.txt or tokenizer.json)";
  }
  const q3::Config& c = e->model_->config();
  e->info_.family = "qwen3-tts";
  e->info_.variant = q3::variant_name(c.variant);
  e->info_.codebooks = e->model_->groups();
  e->info_.sample_rate = c.codec.sample_rate;
  for (const auto& [name, id] : c.talker.speaker_ids) e->info_.speakers.push_back(name);
  for (const auto& [name, id] : c.talker.language_ids) e->info_.languages.push_back(name);
  e->info_.frame_rate = c.codec.samples_per_frame > 0
                            ? static_cast<double>(c.codec.sample_rate) / static_cast<double>(c.codec.samples_per_frame)
                            : 12.5;
  return e;
}

Result<std::vector<int32_t>> Qwen3TtsEngine::wrap(const std::string& s, const char* prefix, const char* suffix,
                                                  const char* what) const {
  if (!tokenizer_)
    return make_error(ErrorCode::kUnsupported, std::string("cannot tokenize the ") + what + ": " + tokenizer_error_ +
                                                   "; give ids instead");
  return tokenizer_->encode(std::string(prefix) + s + suffix);
}

Result<q3::PromptInputs> Qwen3TtsEngine::prompt_inputs(const SynthesisRequest& r) const {
  q3::PromptInputs in;
  // The official wrapper's templates (spec §3.1).
  if (r.text.empty() == r.text_ids.empty()) return bad("give exactly one of text and text ids");
  if (!r.text.empty()) {
    CHORUS_ASSIGN(in.text_ids, wrap(r.text, "<|im_start|>assistant\n", "<|im_end|>\n<|im_start|>assistant\n", "text"));
  } else {
    in.text_ids = r.text_ids;
  }
  if (!r.instruct.empty() && !r.instruct_ids.empty()) return bad("give at most one of instruction and instruction ids");
  if (!r.instruct.empty()) {
    CHORUS_ASSIGN(in.instruct_ids, wrap(r.instruct, "<|im_start|>user\n", "<|im_end|>\n", "instruction"));
  } else {
    in.instruct_ids = r.instruct_ids;
  }
  if (!r.ref_text.empty() && !r.ref_text_ids.empty()) return bad("give at most one of reference text and its ids");
  if (!r.ref_text.empty() && !r.xvector_only) {
    CHORUS_ASSIGN(in.ref_text_ids, wrap(r.ref_text, "<|im_start|>assistant\n", "<|im_end|>\n", "reference text"));
  } else if (!r.xvector_only) {
    in.ref_text_ids = r.ref_text_ids;
  }
  in.speaker = r.speaker;
  in.language = r.language;
  in.speaker_embedding = r.speaker_embedding;
  if (!r.xvector_only) in.ref_codes = r.ref_codes;  // x-vector-only cloning ignores them, as the official API does
  in.xvector_only = r.xvector_only;
  in.layout = r.layout == TextLayout::kStreaming ? q3::TextLayout::kStreaming
              : r.layout == TextLayout::kFull    ? q3::TextLayout::kFull
                                                 : q3::TextLayout::kModelDefault;
  return in;
}

q3::GenerationSettings Qwen3TtsEngine::settings(const SynthesisRequest& r) const {
  const q3::GenerationDefaults& d = model_->config().generation;
  q3::GenerationSettings g;
  g.talker.greedy = !d.do_sample;
  g.talker.temperature = static_cast<float>(d.temperature);
  g.talker.top_k = static_cast<int32_t>(std::clamp<int64_t>(d.top_k, 0, std::numeric_limits<int32_t>::max()));
  g.talker.top_p = static_cast<float>(d.top_p);
  g.talker.repetition_penalty = static_cast<float>(d.repetition_penalty);
  g.code_predictor.greedy = !d.sub_do_sample;
  g.code_predictor.temperature = static_cast<float>(d.sub_temperature);
  g.code_predictor.top_k = static_cast<int32_t>(std::clamp<int64_t>(d.sub_top_k, 0, std::numeric_limits<int32_t>::max()));
  g.code_predictor.top_p = static_cast<float>(d.sub_top_p);
  apply_overrides(r.sampler, g.talker);
  apply_overrides(r.depth_sampler, g.code_predictor);
  g.code_predictor.repetition_penalty = 1.0f;  // the official code predictor has none
  // max_new_tokens counts codebook-0 samples; the official loop's last one never gets a frame.
  g.max_frames = r.max_frames > 0 ? r.max_frames : std::max<int64_t>(1, d.max_new_tokens - 1);
  g.min_frames = r.min_frames >= 0 ? r.min_frames : 2;
  g.seed = r.seed;
  g.rng_stream = r.rng_stream;
  return g;
}

Result<std::unique_ptr<TtsStream>> Qwen3TtsEngine::create_stream(const SynthesisRequest& r) const {
  if (r.max_frames < 0) return bad("max frames must be >= 0 (0: the checkpoint's limit)");
  if (r.cfg_scale || r.dual_cfg)
    return make_error(ErrorCode::kUnsupported, "classifier-free guidance (--cfg-scale, --dual-cfg) is a Breeze TTS 2 "
                                               "feature; Qwen3-TTS has no unconditional branch");
  if (!(r.length_cap.frames_per_token >= 0) || r.length_cap.slack_frames < 0)
    return bad("the length cap needs frames per token >= 0 and slack >= 0");
  CHORUS_ASSIGN(q3::PromptInputs in, prompt_inputs(r));
  CHORUS_ASSIGN(q3::Prompt prompt, q3::build_prompt(*model_, in));
  q3::GenerationSettings g = settings(r);
  const int64_t text_tokens = prompt.text_tokens;
  const int64_t room = model_->config().talker.dims.max_positions - prompt.prefill_rows + 1;
  if (room < 1) return make_error(ErrorCode::kOutOfRange, "the prompt is longer than the talker's context");
  g.max_frames = std::min({g.max_frames, length_cap_frames(r.length_cap, text_tokens), room});
  CHORUS_ASSIGN(auto s, q3::Stream::create(model_, std::move(prompt), g));
  return std::unique_ptr<TtsStream>(new Qwen3Stream(std::move(s), text_tokens));
}

Result<std::unique_ptr<Qwen3TextInput>> Qwen3TtsEngine::text_input(const SynthesisRequest& r) const {
  static constexpr char kPrefix[] = "<|im_start|>assistant\n", kSuffix[] = "<|im_end|>\n<|im_start|>assistant\n";
  if (!r.text.empty() || !r.text_ids.empty()) return bad("a request whose text arrives in pieces has no text of its own");
  if (r.max_frames < 0) return bad("max frames must be >= 0 (0: the checkpoint's limit)");
  if (r.cfg_scale || r.dual_cfg)
    return make_error(ErrorCode::kUnsupported, "classifier-free guidance is a Breeze TTS 2 feature");
  if (!(r.length_cap.frames_per_token >= 0) || r.length_cap.slack_frames < 0)
    return bad("the length cap needs frames per token >= 0 and slack >= 0");
  if (!tokenizer_) return make_error(ErrorCode::kUnsupported, "cannot tokenize text in pieces: " + tokenizer_error_);
  const bool streaming = r.layout == TextLayout::kStreaming ||
                         (r.layout == TextLayout::kModelDefault && model_->config().variant == q3::Variant::kBase);
  if (!streaming)
    return make_error(ErrorCode::kUnsupported, "text in pieces needs the streaming text layout (this model's default "
                                               "is the full-text layout: ask for the streaming layout)");
  const q3::GenerationSettings g = settings(r);
  CHORUS_TRY(sampling::validate(g.talker, "talker sampler"));
  CHORUS_TRY(sampling::validate(g.code_predictor, "code predictor sampler"));
  SynthesisRequest with_ids = r;
  with_ids.text_ids = {0};  // a stand-in: the text comes through the feed
  CHORUS_ASSIGN(q3::PromptInputs in, prompt_inputs(with_ids));
  const std::vector<int32_t> suffix = tokenizer_->encode(kSuffix);
  // Checks everything but the text now (speaker, language, voice), on a one-token stand-in.
  std::vector<int32_t> trial = tokenizer_->encode(std::string(kPrefix) + "a" + kSuffix);
  std::swap(in.text_ids, trial);
  if (auto trial_prompt = q3::build_prompt(*model_, in); !trial_prompt.ok()) return std::move(trial_prompt).error();
  in.text_ids.clear();
  auto feed = std::make_shared<TextFeed>(*tokenizer_, kPrefix, kSuffix);
  return std::make_unique<Qwen3TextInput>(model_, std::move(in), g, r.length_cap, suffix, std::move(feed));
}

Result<std::unique_ptr<TtsStream>> Qwen3TtsEngine::create_text_stream(const SynthesisRequest& r,
                                                                      std::shared_ptr<TextFeed>* feed) const {
  if (!feed) return make_error(ErrorCode::kInternal, "create_text_stream: no feed to fill");
  CHORUS_ASSIGN(std::unique_ptr<Qwen3TextInput> input, text_input(r));
  *feed = input->feed();
  return std::unique_ptr<TtsStream>(std::make_unique<Qwen3TextStream>(model_, std::move(input)));
}

Status Qwen3TtsEngine::step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const {
  if (out.size() != streams.size()) return make_error(ErrorCode::kInternal, "step: one result per stream");
  // Cancelled streams are left out, so they never make another frame.
  std::vector<q3::Stream*> impl;
  std::vector<size_t> index;
  impl.reserve(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    out[i].has_frame = false;
    out[i].codes.clear();
    if (auto* t = dynamic_cast<Qwen3TextStream*>(streams[i])) {
      q3::Stream* s = t->steppable();  // nullptr while it waits for text
      if (s && &s->model() != model_.get()) return make_error(ErrorCode::kInvalidArgument, "step: a stream of another model");
      if (s) {
        impl.push_back(s);
        index.push_back(i);
      }
      continue;
    }
    auto* q = dynamic_cast<Qwen3Stream*>(streams[i]);
    if (!q || &q->impl()->model() != model_.get())
      return make_error(ErrorCode::kInvalidArgument, "step: a stream of another model");
    if (q->finished()) continue;
    impl.push_back(q->impl());
    index.push_back(i);
  }
  std::vector<q3::FrameOutput> frames(impl.size());
  q3::StepTimes t;
  CHORUS_TRY(q3::step_streams(impl, frames, times ? &t : nullptr));
  for (size_t k = 0; k < impl.size(); ++k) {
    out[index[k]].has_frame = frames[k].has_frame;
    out[index[k]].codes = std::move(frames[k].codes);
  }
  if (times) {
    times->prefill_s += t.talker_prefill_s;
    times->backbone_s += t.talker_step_s;
    times->depth_s += t.code_predictor_s;
    times->sampling_s += t.talker_sampling_s;
  }
  return ok_status();
}

const VoiceCloner* Qwen3TtsEngine::voice_cloner() const {
  return model_->config().variant == q3::Variant::kBase ? this : nullptr;
}

Result<const q3::VoiceEncoder*> Qwen3TtsEngine::voice_encoder() const {
  std::lock_guard<std::mutex> lock(voice_mu_);
  if (!voice_encoder_) {
    CHORUS_ASSIGN(q3::VoiceEncoder enc, q3::VoiceEncoder::from_files(model_->files(), model_->pool()));
    voice_encoder_ = std::make_unique<q3::VoiceEncoder>(std::move(enc));
  }
  return voice_encoder_.get();
}

int64_t Qwen3TtsEngine::voice_sample_rate() const {
  auto enc = voice_encoder();
  return enc.ok() ? (*enc)->sample_rate() : model_->config().codec.sample_rate;
}

Result<voice::Voice> Qwen3TtsEngine::encode_voice(const float* samples, int64_t n, bool with_codes) const {
  CHORUS_ASSIGN(const q3::VoiceEncoder* enc, voice_encoder());
  return enc->encode(samples, n, with_codes);
}

Status Qwen3TtsEngine::apply_voice(const voice::Voice& voice, const std::string& label, SynthesisRequest& r,
                                   std::string* note) const {
  if (!voice_cloner())
    return make_error(ErrorCode::kUnsupported, "voice cloning needs a Qwen3-TTS Base or Breeze TTS 2 checkpoint");
  if (!r.speaker_embedding.empty() || !r.ref_codes.empty())
    return bad(label + ": the voice gives the speaker embedding and reference codes: drop the request's own");
  CHORUS_TRY(q3::check_voice_for_model(voice, model_->config(), label));
  const bool request_text = !r.ref_text.empty() || !r.ref_text_ids.empty();
  if (voice.has_ref_text()) {
    if (request_text) return bad(label + " holds its reference text already: drop the request's reference text");
    r.ref_text = voice.ref_text;
    r.ref_text_ids = voice.ref_text_ids;
  }
  r.speaker_embedding = voice.x_vector;
  const bool has_text = !r.ref_text.empty() || !r.ref_text_ids.empty();
  if (!r.xvector_only && (!has_text || !voice.has_codes())) {
    r.xvector_only = true;
    if (note)
      *note = label + (has_text ? " has no reference codes" : ": no reference text") +
              ", so the voice is cloned from its x-vector alone (a reference text enables in-context cloning)";
  }
  if (!r.xvector_only)
    for (int64_t t = 0; t < voice.frames; ++t)
      r.ref_codes.emplace_back(voice.ref_codes.begin() + t * voice.codebooks,
                               voice.ref_codes.begin() + (t + 1) * voice.codebooks);
  return ok_status();
}

}  // namespace chorus::engine
