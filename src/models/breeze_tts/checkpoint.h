// A Breeze TTS 2 checkpoint folder as published on Hugging Face: config.json,
// generation_config.json, model.safetensors (or shards + index), audio_tokenizer/{config.json,
// model.safetensors}, and text-tokenizer files. Opening it validates every file and checks every
// tensor against the weight tables before any model object is built.
//
// Text tokenizer: chorus reads a SentencePiece model, `tokenizer.model` in the folder (the release
// ships only tokenizer.json; Gemma 3's tokenizer.model is the same vocabulary). Without one, prompts
// are given as ids (--text-ids, --instruct-ids, --ref-text-ids).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/checkpoint_files.h"
#include "models/breeze_tts/config.h"

namespace chorus::breeze_tts {

inline constexpr const char* kTokenizerFile = "tokenizer.model";

struct ModelFiles : CheckedCheckpoints {
  std::string dir;  // resolved: a folder, never a hub id
  Config config;
  std::string tokenizer_path;                // empty when the folder has no tokenizer.model
};

// `dir`: a folder or a Hugging Face id in the local cache (io::resolve_model_dir).
Result<ModelFiles> open_model_files(const std::string& dir);

// Writes a complete random-weight checkpoint folder for `config` (make-tiny): main weights bf16 like
// the release (without the dead embed_text_tokens / codec_model tensors), the codec f32, and a small
// SentencePiece tokenizer.model trained on a built-in English text, so the folder works with --text.
Status write_random_model(const std::string& dir, const Config& config, uint64_t seed);

}  // namespace chorus::breeze_tts
