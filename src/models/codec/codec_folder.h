// Finding and loading a speech codec on disk. Accepted layouts:
//   a codec folder itself: config.json with model_type qwen3_tts_tokenizer_12hz + model.safetensors
//   a Qwen3-TTS model folder: its speech_tokenizer/ subfolder
//   a Breeze TTS 2 model folder: its audio_tokenizer/ subfolder
#pragma once

#include <string>

#include "core/error.h"
#include "models/codec/codec_config.h"
#include "models/codec/decoder.h"

namespace chorus::codec {

// The codec folder `dir` designates (see above); kNotFound naming what was looked for.
Result<std::string> find_codec_dir(const std::string& dir);

struct CodecModel {
  std::string dir;  // the codec folder itself
  CodecConfig config;
  Decoder decoder;
};

// Reads the config, validates model.safetensors (or its shards) against the decoder's weight
// table, and builds the decoder.
Result<CodecModel> load_codec(const std::string& dir);

}  // namespace chorus::codec
