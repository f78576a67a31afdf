// A Qwen3-TTS checkpoint folder as published on Hugging Face: config.json, generation_config.json,
// model.safetensors (or shards), text-tokenizer files, speech_tokenizer/{config.json,
// model.safetensors}. Opening it validates every file and checks every tensor against the weight
// tables before any model object is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/checkpoint_files.h"
#include "models/qwen3_tts/config.h"

namespace chorus::qwen3_tts {

struct ModelFiles : CheckedCheckpoints {
  std::string dir;  // resolved: a folder, never a hub id
  Config config;
};

// `dir`: a folder or a Hugging Face id in the local cache (io::resolve_model_dir).
Result<ModelFiles> open_model_files(const std::string& dir);

// Writes a complete random-weight checkpoint folder for `config` (make-tiny). The main weights are
// bf16 like the released checkpoints, the codec f32. A small byte-level BPE tokenizer is written too
// (256 byte tokens, merges for the chat-template words, the special tokens at the config's ids), so
// the folder works with --text.
Status write_random_model(const std::string& dir, const Config& config, uint64_t seed);

}  // namespace chorus::qwen3_tts
