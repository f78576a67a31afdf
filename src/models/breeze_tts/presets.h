// Model shapes for `chorus make-tiny --family breeze-tts`: the tiny test model (the dimensions of the
// reference goldens' tiny_breeze, text ids remapped into a 512-token vocabulary) and the real
// released architecture (random weights, for benchmarks).
#pragma once

#include <string>

#include "core/error.h"
#include "models/breeze_tts/config.h"

namespace chorus::breeze_tts {

enum class Dims { kTiny, kReal };
Result<Dims> dims_from_name(const std::string& name);  // "tiny", "real"

// A complete config (text encoder, backbone, depth decoder, special ids, codec, sampler defaults).
Config preset_config(Dims dims);

}  // namespace chorus::breeze_tts
