// Voice-clone inputs shared by the CLI commands (say, voice, embed-speaker, encode): reference
// audio limits, wrapped-id arguments, and filling a SynthesisRequest from --ref-audio or --voice.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "audio/reader.h"
#include "core/error.h"
#include "engine/model.h"
#include "engine/request.h"

namespace chorus::cli {

// --max-ref-seconds / --min-ref-seconds for reference audio.
struct RefAudioOptions {
  double min_seconds = 0.5, max_seconds = 60.0;
  void add_to(CLI::App& app);
  audio::AudioLimits limits() const;
};

// A JSON array of ids, inline ("[1, 2, 3]") or in a file.
Result<std::vector<int32_t>> read_id_array(const std::string& arg, const char* option);

// --activations: "bf16", "f32", or "" (the model's default).
Result<engine::ActivationPrecision> activation_precision_from_name(const std::string& name);

// --weights: "bf16" (as stored, exact), "int8" or "int4" (quantised at load, CPU only).
// CUDA loads refuse the quantised ones (engine/registry.cpp).
Result<engine::WeightFormat> weight_format_option(const std::string& name);

struct VoiceSource {
  std::string ref_audio;   // encode this file on the fly, or ...
  std::string voice_file;  // ... use a voice made by `chorus voice create`
  RefAudioOptions audio;
};

// Fills the request's speaker embedding, reference codes and (from a voice file) reference text
// (engine::Model::apply_voice). Without reference text (from the command line or the voice file) a
// Qwen3-TTS clone uses the x-vector alone, as with --xvector-only; `note` then says so.
Status apply_voice(const engine::Model& model, const VoiceSource& src, engine::SynthesisRequest& r, std::string* note);

}  // namespace chorus::cli
