#include "bench/engine/requests.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "models/family.h"

namespace chorus::bench {

namespace {

// EOS suppressed, no length cap, the seed and the sampler choice: what every family's request shares.
void fix_length(engine::SynthesisRequest& r, const RequestShape& shape, uint64_t seed, int64_t frames) {
  if (shape.greedy) r.sampler.greedy = r.depth_sampler.greedy = true;
  r.max_frames = frames;
  r.min_frames = frames;
  r.length_cap.frames_per_token = 0;
  r.seed = seed;
}

}  // namespace

engine::SynthesisRequest qwen3_request(const qwen3_tts::Config& c, const RequestShape& shape, uint64_t seed,
                                       int64_t frames) {
  std::mt19937_64 rng(seed);
  const int32_t vocab_top = static_cast<int32_t>(std::min<int64_t>(c.talker.text_vocab, c.im_start_id));
  std::uniform_int_distribution<int32_t> tok(0, std::max(0, vocab_top - 1));
  const int32_t s = static_cast<int32_t>(c.im_start_id), end = static_cast<int32_t>(c.im_end_id);
  engine::SynthesisRequest r;
  r.text_ids = {s, tok(rng), tok(rng)};  // role tokens: their values do not change the cost
  for (int64_t i = 0; i < shape.text_tokens; ++i) r.text_ids.push_back(tok(rng));
  r.text_ids.insert(r.text_ids.end(), {end, tok(rng), s, tok(rng), tok(rng)});
  if (c.variant == qwen3_tts::Variant::kCustomVoice) {
    r.speaker = c.talker.speaker_ids.count("ryan") ? "ryan" : c.talker.speaker_ids.begin()->first;
    r.language = "english";
  }
  if (c.variant == qwen3_tts::Variant::kBase) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < c.talker.dims.hidden; ++i) r.speaker_embedding.push_back(nd(rng));
    r.xvector_only = true;
    r.language = "english";
  }
  fix_length(r, shape, seed, frames);
  return r;
}

engine::SynthesisRequest breeze_request(const breeze_tts::Config& c, const RequestShape& shape, uint64_t seed,
                                        int64_t frames) {
  // Tiny checkpoints remap the special ids into a small vocabulary: stay below every one of them.
  int64_t top = std::min({c.text_vocab, c.ids.audio, c.ids.audio_eos, c.ids.ins_bos, c.ids.ins_eos});
  for (const int64_t s : c.ids.speakers) top = std::min(top, s);
  if (c.text_encoder.eoi_token_id >= 0) top = std::min(top, c.text_encoder.eoi_token_id);
  const int32_t lo = static_cast<int32_t>(std::min<int64_t>(3, top - 1));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(lo, static_cast<int32_t>(std::max<int64_t>(lo, top - 1)));
  engine::SynthesisRequest r;
  for (int64_t i = 0; i < shape.text_tokens; ++i) r.text_ids.push_back(tok(rng));
  if (shape.cfg_scale != 1.0f) {
    for (int64_t i = 0; i < shape.instruct_tokens; ++i) r.instruct_ids.push_back(tok(rng));
    r.cfg_scale = shape.cfg_scale;
  }
  r.activations = shape.activations;
  fix_length(r, shape, seed, frames);
  return r;
}

Result<BenchFamily> bench_family(const std::string& dir, const RequestShape& shape) {
  CHORUS_ASSIGN(const Family family, detect_family(dir));
  BenchFamily f;
  if (family == Family::kBreezeTts) {
    CHORUS_ASSIGN(breeze_tts::Config c, breeze_tts::load_config(dir));
    f.request = [c = std::move(c), shape](uint64_t seed, int64_t frames) { return breeze_request(c, shape, seed, frames); };
    char work[200];
    std::snprintf(work, sizeof work, "%lld text tokens, %s, cfg scale %.2f, %s, %s activations",
                  static_cast<long long>(shape.text_tokens),
                  shape.cfg_scale != 1.0f ? "CFG (design prompt, 2 branches)" : "no CFG (plain prompt, 1 branch)",
                  shape.cfg_scale, shape.greedy ? "greedy" : "checkpoint sampler defaults",
                  shape.activations == engine::ActivationPrecision::kF32 ? "f32" : "bf16");
    f.work = work;
    f.second_stage = "backbone";
    f.first_stage = "depth decoder";
    return f;
  }
  CHORUS_ASSIGN(qwen3_tts::Config c, qwen3_tts::load_config(dir));
  f.request = [c = std::move(c), shape](uint64_t seed, int64_t frames) { return qwen3_request(c, shape, seed, frames); };
  f.second_stage = "talker";
  f.first_stage = "code predictor";
  return f;
}

}  // namespace chorus::bench
