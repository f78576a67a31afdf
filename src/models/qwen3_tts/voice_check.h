// Whether a voice file (models/voice/voice_file.h) fits a Qwen3-TTS model.
#pragma once

#include <string>

#include "core/error.h"
#include "models/qwen3_tts/config.h"
#include "models/voice/voice_file.h"

namespace chorus::qwen3_tts {

using voice::Voice;

// Whether `v` fits a Qwen3-TTS model: family, x-vector size = talker hidden, codebooks = code groups, codes
// below the codebook size.
Status check_voice_for_model(const Voice& v, const Config& config, const std::string& label);

}  // namespace chorus::qwen3_tts
