#include "engine/breeze_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/sampler_overrides.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/tokenizer.h"
#include "models/breeze_tts/voice.h"

namespace chorus::engine {

namespace {

namespace bt = breeze_tts;

Error bad(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

class BreezeStream final : public TtsStream {
 public:
  BreezeStream(const bt::BreezeModel* owner, bt::BreezeGeneration g, int64_t text_tokens)
      : owner_(owner), g_(std::move(g)), text_tokens_(text_tokens) {}
  bool finished() const override { return cancelled_ || g_.finished(); }
  StopReason stop_reason() const override {
    if (cancelled_ && !g_.finished()) return StopReason::kCancelled;
    if (!g_.finished()) return StopReason::kRunning;
    return g_.ended_by_eos() ? StopReason::kEos : StopReason::kMaxFrames;
  }
  int64_t frames() const override { return g_.frames(); }
  int64_t max_frames() const override { return g_.max_frames(); }
  int64_t text_tokens() const override { return text_tokens_; }
  int64_t prompt_rows() const override { return g_.prompt_rows(); }
  size_t state_bytes() const override { return g_.state_bytes(); }
  void cancel() override { cancelled_ = true; }
  const bt::BreezeModel* owner() const { return owner_; }
  bt::BreezeGeneration& gen() { return g_; }

 private:
  const bt::BreezeModel* owner_;
  bt::BreezeGeneration g_;
  int64_t text_tokens_;
  bool cancelled_ = false;
};

}  // namespace

Result<std::unique_ptr<BreezeEngine>> BreezeEngine::load(const std::string& dir, ThreadPool* pool, WeightFormat weights) {
  std::unique_ptr<BreezeEngine> e(new BreezeEngine());
  CHORUS_ASSIGN(bt::ModelFiles files, bt::open_model_files(dir));
  e->files_ = std::make_unique<bt::ModelFiles>(std::move(files));
  CHORUS_ASSIGN(bt::BreezeModel m, bt::BreezeModel::load(*e->files_, weights, pool));
  e->model_ = std::make_unique<bt::BreezeModel>(std::move(m));
  if (!e->files_->tokenizer_path.empty()) {
    CHORUS_ASSIGN(auto tok, bt::load_tokenizer(e->files_->tokenizer_path, e->files_->config));
    e->tokenizer_ = std::move(tok);
  }
  e->pool_ = pool;
  const bt::Config& c = e->files_->config;
  e->info_.family = "breeze-tts";
  e->info_.variant = "breeze-tts-2";
  e->info_.codebooks = c.num_codebooks;
  e->info_.sample_rate = c.codec.sample_rate;
  e->info_.frame_rate = c.codec.samples_per_frame > 0
                            ? static_cast<double>(c.codec.sample_rate) / static_cast<double>(c.codec.samples_per_frame)
                            : 12.5;
  return e;
}

Result<voice::Voice> BreezeEngine::encode_voice(const std::string& audio_path, const audio::AudioLimits& limits) const {
  CHORUS_ASSIGN(const bt::VoiceEncoder enc, bt::VoiceEncoder::from_files(*files_, pool_ ? pool_ : &ThreadPool::global()));
  return enc.encode_file(audio_path, limits);
}

int64_t BreezeEngine::voice_sample_rate() const { return files_->config.codec.input_sample_rate; }

Result<voice::Voice> BreezeEngine::encode_voice(const float* samples, int64_t n, bool) const {
  CHORUS_ASSIGN(const bt::VoiceEncoder enc, bt::VoiceEncoder::from_files(*files_, pool_ ? pool_ : &ThreadPool::global()));
  return enc.encode(samples, n);
}

Status BreezeEngine::apply_voice(const voice::Voice& v, const std::string& label, SynthesisRequest& r) const {
  CHORUS_TRY(bt::check_voice_for_model(v, files_->config, label));
  if (!r.ref_codes.empty()) return bad(label + ": the voice gives the reference codes already: drop the request's own");
  if (v.has_ref_text()) {
    if (!r.ref_text.empty() || !r.ref_text_ids.empty())
      return bad(label + " holds its reference text already: drop --ref-text / --ref-text-ids");
    r.ref_text = v.ref_text;
    r.ref_text_ids = v.ref_text_ids;
  }
  if (r.ref_text.empty() && r.ref_text_ids.empty())
    return bad(label + ": Breeze TTS 2 clones from the reference codes and their transcript: give --ref-text (or --ref-text-ids)");
  const auto K = static_cast<size_t>(v.codebooks);
  for (int64_t t = 0; t < v.frames; ++t)
    r.ref_codes.emplace_back(v.ref_codes.begin() + static_cast<ptrdiff_t>(t * K),
                             v.ref_codes.begin() + static_cast<ptrdiff_t>((t + 1) * K));
  return ok_status();
}

Result<std::vector<int32_t>> BreezeEngine::ids_of(const std::string& s, const std::vector<int32_t>& ids,
                                                  const char* what) const {
  if (!s.empty() && !ids.empty()) return bad(std::string("give at most one of the ") + what + " and its ids");
  if (s.empty()) return ids;
  if (!tokenizer_)
    return make_error(ErrorCode::kUnsupported, std::string("cannot tokenize the ") + what +
                                                   ": the checkpoint has no tokenizer.model; give ids instead");
  return tokenizer_->encode(s);
}

Result<bt::PromptParts> BreezeEngine::prompt_parts(const SynthesisRequest& r) const {
  const bt::Config& c = files_->config;
  bt::PromptParts p;
  if (r.text.empty() == r.text_ids.empty()) return bad("give exactly one of text and text ids");
  if (!r.speaker_embedding.empty() || r.xvector_only) return bad("Breeze TTS 2 has no speaker embedding input");
  CHORUS_ASSIGN(p.text, ids_of(r.text, r.text_ids, "text"));
  CHORUS_ASSIGN(p.instruct, ids_of(r.instruct, r.instruct_ids, "instruction"));
  CHORUS_ASSIGN(p.ref_text, ids_of(r.ref_text, r.ref_text_ids, "reference text"));
  if (p.ref_text.empty() != r.ref_codes.empty()) return bad("voice cloning needs both reference codes and their transcript");
  for (const auto& f : r.ref_codes) {
    if (static_cast<int64_t>(f.size()) != c.num_codebooks)
      return bad("every reference frame needs " + std::to_string(c.num_codebooks) + " codes");
    p.ref.codes.insert(p.ref.codes.end(), f.begin(), f.end());
  }
  p.ref.frames = static_cast<int64_t>(r.ref_codes.size());
  // [S0]..[S9]: "S3", "3" or empty (S0).
  if (!r.speaker.empty()) {
    const std::string s = r.speaker[0] == 'S' || r.speaker[0] == 's' ? r.speaker.substr(1) : r.speaker;
    if (s.size() != 1 || s[0] < '0' || s[0] > '9') return bad("Breeze TTS 2 speakers are S0 .. S9");
    p.speaker = s[0] - '0';
  }
  return p;
}

Result<bt::GenerationParams> BreezeEngine::params(const SynthesisRequest& r, const bt::PromptParts& parts) const {
  const bt::Config& c = files_->config;
  bt::GenerationParams g = bt::default_generation_params(c);
  const bool ref = !parts.ref.codes.empty(), ins = !parts.instruct.empty();
  g.layout = ref && ins ? bt::Layout::kDirection : ref ? bt::Layout::kClone : ins ? bt::Layout::kDesign : bt::Layout::kPlain;
  if (r.cfg_scale && r.dual_cfg) return bad("give at most one of cfg_scale and dual_cfg");
  if (r.cfg_scale && !std::isfinite(*r.cfg_scale)) return bad("cfg_scale must be finite");
  if (r.cfg_scale && *r.cfg_scale != 1.0f) {
    g.guidance = bt::Guidance::kCfg;
    g.cfg_scale = *r.cfg_scale;
  }
  if (r.dual_cfg) {
    if (!std::isfinite(r.dual_cfg->first) || !std::isfinite(r.dual_cfg->second)) return bad("dual_cfg scales must be finite");
    g.guidance = bt::Guidance::kDual;
    g.ref_scale = r.dual_cfg->first;
    g.ins_scale = r.dual_cfg->second;
  }
  apply_overrides(r.sampler, g.backbone);
  apply_overrides(r.depth_sampler, g.depth);
  g.depth.repetition_penalty = 1.0f;  // upstream's depth sampler has none
  if (r.max_frames < 0) return bad("max frames must be >= 0 (0: the checkpoint's limit)");
  if (!(r.length_cap.frames_per_token >= 0) || r.length_cap.slack_frames < 0)
    return bad("the length cap needs frames per token >= 0 and slack >= 0");
  const int64_t limit = r.max_frames > 0 ? r.max_frames : c.generation.max_new_tokens;
  g.max_frames = std::min(limit, length_cap_frames(r.length_cap, static_cast<int64_t>(parts.text.size())));
  g.min_frames = std::max<int64_t>(0, r.min_frames);  // upstream has no minimum
  g.seed = r.seed;
  g.rng_stream = r.rng_stream;
  // Default bf16: real checkpoints need it (f32 activations drift into mispronunciation, spec §5.6);
  // f32 reproduces the goldens.
  g.act = r.activations == ActivationPrecision::kF32 ? bt::Activations::kF32 : bt::Activations::kBF16;
  return g;
}

Result<std::unique_ptr<TtsStream>> BreezeEngine::create_stream(const SynthesisRequest& r) const {
  CHORUS_ASSIGN(bt::PromptParts parts, prompt_parts(r));
  CHORUS_ASSIGN(const bt::GenerationParams g, params(r, parts));
  CHORUS_ASSIGN(bt::BreezeGeneration gen, bt::BreezeGeneration::start(*model_, parts, g));
  if (gen.max_frames() < 1) return make_error(ErrorCode::kOutOfRange, "the prompt is longer than the backbone's context");
  return std::unique_ptr<TtsStream>(new BreezeStream(model_.get(), std::move(gen), static_cast<int64_t>(parts.text.size())));
}

Status BreezeEngine::step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const {
  if (out.size() != streams.size()) return make_error(ErrorCode::kInternal, "step: one result per stream");
  // Cancelled streams are left out, so they never make another frame.
  std::vector<bt::BreezeGeneration*> gens;
  std::vector<size_t> index;
  for (size_t i = 0; i < streams.size(); ++i) {
    auto* b = dynamic_cast<BreezeStream*>(streams[i]);
    if (!b || b->owner() != model_.get()) return make_error(ErrorCode::kInvalidArgument, "step: a stream of another model");
    out[i].has_frame = false;
    out[i].codes.clear();
    if (b->finished()) continue;
    gens.push_back(&b->gen());
    index.push_back(i);
  }
  std::vector<bt::StepFrame> frames(gens.size());
  bt::GenerationTimes t;
  CHORUS_TRY(bt::step_generations(gens, frames, pool_, &t));
  for (size_t k = 0; k < gens.size(); ++k) {
    out[index[k]].has_frame = frames[k].has_frame;
    out[index[k]].codes = std::move(frames[k].codes);
  }
  if (times) {
    times->prefill_s += t.prefill_s;
    times->backbone_s += t.backbone_s;
    times->depth_s += t.depth_s;
    times->sampling_s += t.sampling_s;
  }
  return ok_status();
}

}  // namespace chorus::engine
