// The tensors a Qwen3-TTS model.safetensors must hold, per stage, with shapes from the config.
#pragma once

#include "models/qwen3_tts/config.h"
#include "io/weight_table.h"

namespace chorus::qwen3_tts {

void declare_talker_weights(const Config& c, WeightTable& t);
void declare_code_predictor_weights(const Config& c, WeightTable& t);
void declare_speaker_encoder_weights(const Config& c, WeightTable& t);  // Base only
// All of the above for the model's variant.
WeightTable main_weight_table(const Config& c);

}  // namespace chorus::qwen3_tts
