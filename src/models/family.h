// Which model family a checkpoint folder holds, from its config.json.
#pragma once

#include <string>

#include "core/error.h"

namespace chorus {

enum class Family { kQwen3Tts, kBreezeTts };
const char* family_name(Family f);  // "qwen3-tts", "breeze-tts"
Result<Family> family_from_name(const std::string& name);
Result<Family> detect_family(const std::string& dir);

}  // namespace chorus
