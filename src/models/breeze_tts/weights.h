// The tensors a Breeze TTS 2 model.safetensors must hold, per stage, with shapes from the config
// (breeze_tts2.md §3.1). The codec under audio_tokenizer/ uses codec::codec_weight_table.
//
// Not declared, so `inspect` lists them as unused: the dead Mimi `codec_model.*` tensors and any
// `rotary_emb.inv_freq` / `*.initialized` buffers. Declared optional: the dead text table
// `embed_text_tokens.weight` and the backbone's audio table, which the release ties to (and omits
// in favour of) `depth_decoder.model.embed_tokens.weight`.
#pragma once

#include "models/breeze_tts/config.h"
#include "io/weight_table.h"

namespace chorus::breeze_tts {

// Names the stages use.
inline constexpr const char* kAudioTable = "depth_decoder.model.embed_tokens.weight";
inline constexpr const char* kTextEncoderPrefix = "text_encoder.";
inline constexpr const char* kTextProjection = "text_encoder_proj.weight";
inline constexpr const char* kBackbonePrefix = "backbone_model.";
inline constexpr const char* kLmHead = "lm_head.weight";
inline constexpr const char* kDepthPrefix = "depth_decoder.model.";
inline constexpr const char* kDepthProjector = "depth_decoder.model.inputs_embeds_projector.weight";
inline constexpr const char* kCodebooksHead = "depth_decoder.codebooks_head.weight";  // [heads, in, out]

void declare_text_encoder_weights(const Config& c, WeightTable& t);  // encoder + its projection
void declare_backbone_weights(const Config& c, WeightTable& t);      // Qwen3 stack + lm_head
void declare_depth_weights(const Config& c, WeightTable& t);         // shared audio table + depth decoder
WeightTable main_weight_table(const Config& c);

}  // namespace chorus::breeze_tts
