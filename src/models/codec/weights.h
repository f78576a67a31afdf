// The tensors a speech-codec model.safetensors must hold (decoder always; encoder when the config
// has one), with shapes from the config. Names as in the published checkpoints.
#pragma once

#include "models/codec/codec_config.h"
#include "io/weight_table.h"

namespace chorus::codec {

void declare_decoder_weights(const CodecConfig& c, WeightTable& t);
void declare_encoder_weights(const CodecConfig& c, WeightTable& t);
WeightTable codec_weight_table(const CodecConfig& c, bool with_encoder);

// Writes a random-weight codec folder (config.json, preprocessor_config.json, f32
// model.safetensors) for make-tiny; the encoder is included when the config has one.
Status write_random_codec(const std::string& dir, const CodecConfig& c, uint64_t seed);

}  // namespace chorus::codec
