#include "models/qwen3_tts/voice_check.h"

namespace chorus::qwen3_tts {

using voice::kVoiceFamilyQwen3;

Status check_voice_for_model(const Voice& v, const Config& config, const std::string& label) {
  if (v.model_family != kVoiceFamilyQwen3)
    return make_error(ErrorCode::kUnsupported, label + ": the voice was made for a " + v.model_family.substr(0, 64) +
                                                   " model; make one for this model with `chorus voice create --model ...`");
  const int64_t hidden = config.talker.dims.hidden;
  if (static_cast<int64_t>(v.x_vector.size()) != hidden)
    return make_error(ErrorCode::kShapeMismatch, label + ": the voice's x-vector has " + std::to_string(v.x_vector.size()) +
                                                     " values but this model's speaker slot has " + std::to_string(hidden) +
                                                     " (was the voice made with another model size?)");
  if (v.has_codes()) {
    if (v.codebooks != config.talker.num_code_groups)
      return make_error(ErrorCode::kShapeMismatch, label + ": the voice's reference codes have " + std::to_string(v.codebooks) +
                                                       " codebooks, the model " + std::to_string(config.talker.num_code_groups));
    for (size_t i = 0; i < v.ref_codes.size(); ++i)
      if (v.ref_codes[i] >= config.code_predictor.vocab)
        return make_error(ErrorCode::kOutOfRange, label + ": reference code " + std::to_string(v.ref_codes[i]) + " at frame " +
                                                      std::to_string(i / v.codebooks) + " is outside the codebook");
  }
  return ok_status();
}

}  // namespace chorus::qwen3_tts
