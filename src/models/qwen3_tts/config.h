// Qwen3-TTS checkpoint configuration (config.json + generation_config.json), parsed into typed,
// range-checked structs. Field meanings: docs of the Hugging Face checkpoints and
// ../shared/docs/models/qwen3_tts.md §1.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/codec/codec_config.h"
#include "nn/qwen3_block.h"

namespace chorus::qwen3_tts {

enum class Variant { kBase, kCustomVoice, kVoiceDesign };
const char* variant_name(Variant v);  // "base", "custom_voice", "voice_design"
std::optional<Variant> variant_from_name(const std::string& s);

struct TalkerConfig {
  nn::Qwen3Dims dims;          // the transformer stack
  int64_t codec_vocab = 3072;  // codec_head / codec_embedding rows
  int64_t text_vocab = 151936;
  int64_t text_hidden = 2048;
  int64_t num_code_groups = 16;
  int64_t codec_pad_id = 2148, codec_bos_id = 2149, codec_eos_id = 2150;
  int64_t codec_think_id = 2154, codec_nothink_id = 2155, codec_think_bos_id = 2156, codec_think_eos_id = 2157;
  std::map<std::string, int64_t> language_ids;      // "english" -> 2050
  std::map<std::string, int64_t> speaker_ids;       // CustomVoice: "ryan" -> 3061
  std::map<std::string, std::string> speaker_dialect;  // "eric" -> "sichuan_dialect"
};

struct CodePredictorConfig {
  nn::Qwen3Dims dims;
  int64_t vocab = 2048;
  int64_t num_code_groups = 16;
};

struct SpeakerEncoderConfig {
  int64_t mel_dim = 128;
  int64_t enc_dim = 1024;
  int64_t channels[5] = {512, 512, 512, 512, 1536};
  int64_t kernel_sizes[5] = {5, 3, 3, 3, 1};
  int64_t dilations[5] = {1, 2, 3, 4, 1};
  int64_t attention_channels = 128;
  int64_t res2net_scale = 8;
  int64_t se_channels = 128;
  int64_t sample_rate = 24000;
};

// Sampler defaults of the checkpoint (generation_config.json); the official wrapper's fallbacks
// fill keys the file lacks.
struct GenerationDefaults {
  bool do_sample = true;
  int64_t top_k = 50;
  double top_p = 1.0, temperature = 0.9, repetition_penalty = 1.05;
  bool sub_do_sample = true;
  int64_t sub_top_k = 50;
  double sub_top_p = 1.0, sub_temperature = 0.9;
  int64_t max_new_tokens = 2048;
};

struct Config {
  Variant variant = Variant::kCustomVoice;
  std::string size_label;  // "0b6" / "1b7" as in tts_model_size
  int64_t im_start_id = 151644, im_end_id = 151645;
  int64_t tts_pad_id = 151671, tts_bos_id = 151672, tts_eos_id = 151673;
  TalkerConfig talker;
  CodePredictorConfig code_predictor;
  std::optional<SpeakerEncoderConfig> speaker_encoder;  // Base only
  GenerationDefaults generation;
  codec::CodecConfig codec;  // speech_tokenizer/config.json
};

// Reads config.json, generation_config.json (optional) and speech_tokenizer/config.json of `dir`.
Result<Config> load_config(const std::string& dir);
// Parses the main config.json object alone (used by load_config and tests).
Result<Config> parse_config(const nlohmann::json& root, const std::string& label);
Result<GenerationDefaults> parse_generation_config(const nlohmann::json& root, const std::string& label);

// The official on-disk JSON of a config (used by make-tiny).
nlohmann::json config_to_json(const Config& c);
nlohmann::json generation_to_json(const GenerationDefaults& g);

}  // namespace chorus::qwen3_tts
