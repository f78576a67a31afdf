// Model shapes for `chorus make-tiny`: the tiny test models (the dimensions of the reference
// goldens' tiny models) and the real 0.6B / 1.7B architectures (for benchmarks with random weights).
#pragma once

#include <string>

#include "core/error.h"
#include "models/qwen3_tts/config.h"

namespace chorus::qwen3_tts {

enum class Dims { kTiny, kReal06B, kReal17B };
Result<Dims> dims_from_name(const std::string& name);  // "tiny", "real-0.6b", "real-1.7b"

// A complete config (talker, code predictor, speaker encoder for Base, codec, sampler defaults)
// with the real special ids, language ids and (CustomVoice) speakers.
Config preset_config(Variant variant, Dims dims);

}  // namespace chorus::qwen3_tts
