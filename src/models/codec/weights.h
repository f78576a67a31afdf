// The tensors a speech-codec model.safetensors must hold (decoder always; encoder when the config
// has one), with shapes from the config. Names as in the published checkpoints.
#pragma once

#include "models/codec/codec_config.h"
#include "models/weight_table.h"

namespace chorus::codec {

void declare_decoder_weights(const CodecConfig& c, WeightTable& t);
void declare_encoder_weights(const CodecConfig& c, WeightTable& t);
WeightTable codec_weight_table(const CodecConfig& c, bool with_encoder);

}  // namespace chorus::codec
