// The requests `chorus bench` times, per model family: random text ids below every special id of
// the checkpoint, EOS suppressed so every stream makes exactly the frames asked for. A family
// supplies only this (and the names of its two stages); the measurements are shared
// (cuda_bench.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/error.h"
#include "engine/request.h"
#include "models/breeze_tts/config.h"
#include "models/qwen3_tts/config.h"

namespace chorus::bench {

// What every request of a run looks like, whatever the family.
struct RequestShape {
  int64_t text_tokens = 30;
  int64_t instruct_tokens = 16;  // Breeze with guidance: the random instruction's length
  bool greedy = false;           // argmax instead of the checkpoint's sampler
  float cfg_scale = 1.0f;        // Breeze: ≠ 1 is a design prompt with classifier-free guidance
  engine::ActivationPrecision activations = engine::ActivationPrecision::kModelDefault;  // Breeze
};

// Qwen3-TTS, like the PyTorch baseline's (reference bench.json): the random tokens wrapped as the
// official wrapper does, the model's default layout, a speaker for CustomVoice, a random x-vector
// for Base.
engine::SynthesisRequest qwen3_request(const qwen3_tts::Config& c, const RequestShape& shape, uint64_t seed,
                                       int64_t frames);
// Breeze TTS 2: without guidance the plain layout (one branch), with it a design prompt (a random
// instruction; conditional and unconditional branches).
engine::SynthesisRequest breeze_request(const breeze_tts::Config& c, const RequestShape& shape, uint64_t seed,
                                        int64_t frames);

// A checkpoint's family as the benchmark sees it.
struct BenchFamily {
  std::function<engine::SynthesisRequest(uint64_t seed, int64_t frames)> request;
  std::string work;          // what each request holds, for the report; empty: not printed
  std::string second_stage;  // the frame's second half: "talker" / "backbone"
  std::string first_stage;   // its first half: "code predictor" / "depth decoder"
};
// Detects the family of the checkpoint in `dir` and reads its config.
Result<BenchFamily> bench_family(const std::string& dir, const RequestShape& shape);

}  // namespace chorus::bench
