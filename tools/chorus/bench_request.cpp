#include "bench_request.h"

#include <algorithm>
#include <random>

namespace chorus::cli {

engine::SynthesisRequest qwen3_bench_request(const engine::Qwen3TtsEngine& e, const BenchRequestOptions& o, uint64_t seed) {
  const auto& c = e.model().config();
  std::mt19937_64 rng(seed);
  const int32_t vocab_top = static_cast<int32_t>(std::min<int64_t>(c.talker.text_vocab, c.im_start_id));
  std::uniform_int_distribution<int32_t> tok(0, std::max(0, vocab_top - 1));
  const int32_t s = static_cast<int32_t>(c.im_start_id), end = static_cast<int32_t>(c.im_end_id);
  engine::SynthesisRequest r;
  r.text_ids = {s, tok(rng), tok(rng)};  // role tokens: their values do not change the cost
  for (int64_t i = 0; i < o.text_tokens; ++i) r.text_ids.push_back(tok(rng));
  r.text_ids.insert(r.text_ids.end(), {end, tok(rng), s, tok(rng), tok(rng)});
  if (c.variant == qwen3_tts::Variant::kCustomVoice) {
    r.speaker = c.talker.speaker_ids.count("ryan") ? "ryan" : c.talker.speaker_ids.begin()->first;
    r.language = "english";
  }
  if (c.variant == qwen3_tts::Variant::kBase) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t i = 0; i < e.model().hidden(); ++i) r.speaker_embedding.push_back(nd(rng));
    r.xvector_only = true;
    r.language = "english";
  }
  if (o.greedy) r.sampler.greedy = r.depth_sampler.greedy = true;
  r.max_frames = o.frames;
  r.min_frames = o.frames;
  r.length_cap.frames_per_token = 0;
  r.seed = seed;
  return r;
}

engine::SynthesisRequest breeze_bench_request(const engine::BreezeEngine& e, const BenchRequestOptions& o, uint64_t seed) {
  const auto& c = e.files().config;
  int64_t top = std::min({c.text_vocab, c.ids.audio, c.ids.audio_eos, c.ids.ins_bos, c.ids.ins_eos});
  for (const int64_t sp : c.ids.speakers) top = std::min(top, sp);
  if (c.text_encoder.eoi_token_id >= 0) top = std::min(top, c.text_encoder.eoi_token_id);
  const int32_t lo = static_cast<int32_t>(std::min<int64_t>(3, top - 1));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(lo, static_cast<int32_t>(std::max<int64_t>(lo, top - 1)));
  engine::SynthesisRequest r;
  for (int64_t i = 0; i < o.text_tokens; ++i) r.text_ids.push_back(tok(rng));
  if (o.greedy) r.sampler.greedy = r.depth_sampler.greedy = true;
  r.max_frames = o.frames;
  r.min_frames = o.frames;
  r.length_cap.frames_per_token = 0;
  r.seed = seed;
  return r;
}

}  // namespace chorus::cli
