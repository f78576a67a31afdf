// Requests for the measuring commands (bench, quality): random text of a given length with EOS
// suppressed, so every stream makes exactly the asked number of frames.
#pragma once

#include <cstdint>

#include "engine/breeze_engine.h"
#include "engine/qwen3_tts_engine.h"

namespace chorus::cli {

struct BenchRequestOptions {
  int64_t frames = 100, text_tokens = 30;
  bool greedy = false;
};

// A request like the PyTorch baseline's (reference bench.json): `text_tokens` random text tokens
// wrapped as the official wrapper does, the model's default layout, a speaker for CustomVoice, a
// random x-vector for Base.
engine::SynthesisRequest qwen3_bench_request(const engine::Qwen3TtsEngine& e, const BenchRequestOptions& o,
                                             uint64_t seed);
// Breeze TTS 2: random ids below every special id of the checkpoint.
engine::SynthesisRequest breeze_bench_request(const engine::BreezeEngine& e, const BenchRequestOptions& o,
                                              uint64_t seed);

}  // namespace chorus::cli
