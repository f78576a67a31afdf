#include "capi/request_mapping.h"

#include <cmath>
#include <optional>

namespace chorus::capi {

namespace {

Status bad(const std::string& m) { return make_error(ErrorCode::kInvalidArgument, m); }

// Negative means "the checkpoint's default"; NaN and infinities are refused rather than defaulted.
Result<std::optional<float>> opt_float(float v, const char* name) {
  if (!std::isfinite(v)) return make_error(ErrorCode::kOutOfRange, std::string(name) + " must be a finite number");
  if (v < 0) return std::optional<float>();
  return std::optional<float>(v);
}

std::optional<int32_t> opt_int(int32_t v) { return v < 0 ? std::optional<int32_t>() : std::optional<int32_t>(v); }

std::optional<bool> opt_bool(int v) { return v < 0 ? std::optional<bool>() : std::optional<bool>(v != 0); }

}  // namespace

Status to_engine_request(const chorus_request& in, const engine::Model& model, const voice::Voice* voice,
                         const std::string& label, engine::SynthesisRequest* out) {
  engine::SynthesisRequest r;
  if (!in.text || !*in.text) return bad("text is empty");
  r.text = in.text;
  if (in.instructions) r.instruct = in.instructions;
  if (in.speaker) r.speaker = in.speaker;
  r.language = in.language && *in.language ? in.language : "auto";
  if (in.ref_text) r.ref_text = in.ref_text;
  r.xvector_only = in.xvector_only != 0;
  switch (in.text_layout) {
    case CHORUS_TEXT_MODEL_DEFAULT: r.layout = engine::TextLayout::kModelDefault; break;
    case CHORUS_TEXT_STREAMING: r.layout = engine::TextLayout::kStreaming; break;
    case CHORUS_TEXT_FULL: r.layout = engine::TextLayout::kFull; break;
    default: return bad("text_layout must be 0 (model default), 1 (streaming) or 2 (full)");
  }
  r.seed = in.seed;
  r.rng_stream = in.rng_stream;

  CHORUS_ASSIGN(const std::optional<float> temperature, opt_float(in.temperature, "temperature"));
  CHORUS_ASSIGN(const std::optional<float> top_p, opt_float(in.top_p, "top_p"));
  CHORUS_ASSIGN(const std::optional<float> penalty, opt_float(in.repetition_penalty, "repetition_penalty"));
  CHORUS_ASSIGN(const std::optional<float> sub_temperature, opt_float(in.subtalker_temperature, "subtalker_temperature"));
  CHORUS_ASSIGN(const std::optional<float> sub_top_p, opt_float(in.subtalker_top_p, "subtalker_top_p"));
  CHORUS_ASSIGN(const std::optional<float> cfg, opt_float(in.cfg_scale, "cfg_scale"));
  const std::optional<int32_t> top_k = opt_int(in.top_k), sub_top_k = opt_int(in.subtalker_top_k);
  const std::optional<bool> greedy = opt_bool(in.greedy), sub_greedy = opt_bool(in.subtalker_greedy);
  if (top_p && (*top_p <= 0 || *top_p > 1)) return make_error(ErrorCode::kOutOfRange, "top_p must be in (0, 1]");
  if (sub_top_p && (*sub_top_p <= 0 || *sub_top_p > 1))
    return make_error(ErrorCode::kOutOfRange, "subtalker_top_p must be in (0, 1]");
  // As `chorus say`: greedy and the sampling values apply to every codebook; asking for a sampling
  // value without greedy means sampling. The subtalker_* fields then override the code predictor's.
  for (engine::SamplerOverrides* s : {&r.sampler, &r.depth_sampler}) {
    s->greedy = greedy;
    if (!greedy && (temperature || top_k || top_p)) s->greedy = false;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
  }
  if (sub_greedy) r.depth_sampler.greedy = sub_greedy;
  if (sub_temperature) r.depth_sampler.temperature = sub_temperature;
  if (sub_top_k) r.depth_sampler.top_k = sub_top_k;
  if (sub_top_p) r.depth_sampler.top_p = sub_top_p;
  r.sampler.repetition_penalty = penalty;
  r.cfg_scale = cfg;
  r.max_frames = in.max_frames < 0 ? 0 : in.max_frames;
  r.min_frames = in.min_frames < 0 ? -1 : in.min_frames;

  if (voice) {
    if (!model.clones_voices())
      return make_error(ErrorCode::kUnsupported,
                        "a cloned voice needs a Qwen3-TTS Base or Breeze TTS 2 checkpoint, not " + model.info().family +
                            " " + model.info().variant);
    if (model.info().family == "breeze-tts" && r.xvector_only)
      return bad("Breeze TTS 2 has no x-vector: drop xvector_only");
    // A transcript given with the request replaces the voice's own.
    voice::Voice v = *voice;
    if (!r.ref_text.empty()) {
      v.ref_text = r.ref_text;
      v.ref_text_ids.clear();
    }
    r.ref_text.clear();
    CHORUS_TRY(model.apply_voice(v, label, r, nullptr));
  } else if (in.ref_text && *in.ref_text) {
    return bad("ref_text is the transcript of a voice's reference audio: give the voice too");
  }
  *out = std::move(r);
  return ok_status();
}

}  // namespace chorus::capi
