// Breeze TTS 2 checkpoint configuration (config.json, generation_config.json and the codec's
// audio_tokenizer/config.json), parsed into typed, range-checked structs. Field meanings:
// ../shared/docs/models/breeze_tts2.md §2.
//
// The wrapper's top level repeats backbone-looking keys (rope_theta 500000, llama3 rope_scaling,
// rms_norm_eps 1e-5, hidden_size, ...) that the backbone does not use: the backbone reads only
// backbone_config, the depth decoder only depth_decoder_config, the text encoder only
// text_encoder_config. Every id the prompt needs comes from the file, so tiny checkpoints can remap
// the 262k-token Gemma vocabulary into a small one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/codec/codec_config.h"
#include "nn/qwen3_block.h"

namespace chorus::breeze_tts {

// HF "llama3" RoPE frequency scaling (used by the depth decoder over positions 0..15).
struct Llama3RopeScaling {
  bool enabled = false;
  double factor = 32.0;
  double low_freq_factor = 1.0 / 512.0;
  double high_freq_factor = 1.0 / 128.0;
  int64_t original_max_positions = 16;
};

struct BackboneConfig {
  nn::Qwen3Dims dims;  // Qwen3 with q/k norm; eps 1e-6, theta 1e6, no scaling
};

struct DepthDecoderConfig {
  nn::Qwen3Dims dims;  // Llama: no q/k norm
  Llama3RopeScaling rope_scaling;
  int64_t vocab = 2051;               // per codebook, = the wrapper's audio vocab
  int64_t num_codebooks = 16;         // 15 decode steps
  int64_t backbone_hidden = 2048;     // width of the hidden state fed at position 0
  int64_t audio_embed = 2048;         // width of the shared audio table rows
};

enum class TextLayerType { kSliding, kFull };

struct TextRope {
  double theta = 10000.0;
  double linear_factor = 1.0;  // "linear" rope_type divides inv_freq by this; 1 for "default"
};

struct TextEncoderConfig {
  int64_t hidden = 1152;
  int64_t intermediate = 6912;
  int64_t layers = 26;
  int64_t heads = 4;
  int64_t kv_heads = 1;
  int64_t head_dim = 256;
  double rms_eps = 1e-6;
  double query_pre_attn_scalar = 256.0;  // attention scale = query_pre_attn_scalar^-0.5
  int64_t sliding_window = 512;          // symmetric, bidirectional (see text_encoder.h)
  std::vector<TextLayerType> layer_types;
  TextRope rope_sliding{10000.0, 1.0};
  TextRope rope_full{1e6, 8.0};
  int64_t eoi_token_id = 256000;  // its rows use eoi_embedding; -1 when the config has none
  int64_t max_positions = 131072;
};

// Text-side ids (Gemma vocabulary, or the tiny checkpoint's remapped one) and codec-side ids.
struct SpecialIds {
  int64_t pad = 0, eos = 1, bos = 2;
  int64_t audio = 262144, audio_eos = 262145;
  std::vector<int64_t> speakers;  // [S0]..[S9]
  int64_t ins_bos = 262156, ins_eos = 262157;
  int64_t codebook_pad = 2050;  // reserved audio id (masked)
  int64_t codebook_eos = 0;     // code used in every codebook of the audio-EOS frame
};

// Sampler defaults: generation_config.json plus the upstream runtime's fixed choices.
struct GenerationDefaults {
  bool do_sample = true;
  double temperature = 0.9;
  int64_t top_k = 50;
  double top_p = 1.0;
  bool depth_do_sample = true;
  double depth_temperature = 0.9;
  int64_t depth_top_k = 50;
  double depth_top_p = 1.0;
  // Backbone codebook-0 only; upstream's CLI/API default (not in generation_config.json).
  double repetition_penalty = 1.1;
  // generation_config.json says 750 (the HF generate() default); the upstream CLI and API use 1500.
  int64_t config_max_new_tokens = 750;
  int64_t max_new_tokens = 1500;
  int64_t max_seq_len = 2048;  // backbone positions, prompt included (upstream CLI/API)
};

struct Config {
  int64_t num_codebooks = 16;
  int64_t audio_vocab = 2051;   // per codebook: codec codes + reserved ids; lm_head has one more (EOS)
  int64_t hidden = 2048;        // = backbone hidden
  int64_t audio_embed = 2048;   // = hidden (no projectors)
  int64_t text_vocab = 262158;  // rows of the text encoder's (resized) embedding table
  int64_t codec_codebook_size = 2048;  // codec_config.codebook_size: ids >= this are reserved
  int64_t sample_rate = 24000;
  BackboneConfig backbone;
  DepthDecoderConfig depth;
  TextEncoderConfig text_encoder;
  SpecialIds ids;
  GenerationDefaults generation;
  codec::CodecConfig codec;  // audio_tokenizer/config.json

  // The backbone's EOS class: one past the audio ids (lm_head row audio_vocab).
  int64_t backbone_eos() const { return audio_vocab; }
  int64_t lm_head_rows() const { return audio_vocab + 1; }
};

// Reads config.json, generation_config.json (optional) and audio_tokenizer/config.json of `dir`.
Result<Config> load_config(const std::string& dir);
// The main config.json object alone (used by load_config and tests).
Result<Config> parse_config(const nlohmann::json& root, const std::string& label);
// Fills the generation_config.json fields of `g` (keys the file lacks keep their values).
Status parse_generation_config(const nlohmann::json& root, const std::string& label, GenerationDefaults& g);

// The upstream on-disk JSON (used by make-tiny): nested configs, the top-level decoys, the Mimi
// codec_config leftover and the special-token block.
nlohmann::json config_to_json(const Config& c);
nlohmann::json generation_to_json(const GenerationDefaults& g);

}  // namespace chorus::breeze_tts
