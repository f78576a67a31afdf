// A loaded model, ready to speak: the family's generator (text → codec frames) and the codec
// (frames → audio) on one device, both immutable and shared by every request, plus what a request
// needs from the checkpoint to clone a voice. Loaded once through the family registry
// (registry.h):
//
//   CHORUS_ASSIGN(auto model, engine::load("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", {.device = Device::cuda()}));
//   engine::Synthesizer synth(model);                     // synthesizer.h
#pragma once

#include <memory>
#include <string>

#include "audio/reader.h"
#include "core/error.h"
#include "engine/codec.h"
#include "engine/device.h"
#include "engine/request.h"
#include "engine/tts_model.h"
#include "models/voice/voice_file.h"

namespace chorus::engine {

// A voice reference as given: an audio file, or a whole file's bytes held in memory.
struct ReferenceAudio {
  std::string path;
  std::string bytes;   // used when path is empty
  std::string label;   // names it in errors (default: the path, or "reference audio")
  audio::AudioLimits limits;
};

class Model {
 public:
  const ModelInfo& info() const { return generator_->info(); }
  Device device() const { return device_; }
  WeightFormat weights() const { return weights_; }  // LoadOptions::weights
  const std::string& dir() const { return dir_; }
  const TtsModel& generator() const { return *generator_; }
  const Codec& codec() const { return *codec_; }
  bool has_codec() const { return codec_ != nullptr; }

  // Whether voices can be cloned from audio (Qwen3-TTS Base, Breeze TTS 2).
  bool clones_voices() const;
  // Reference audio → a reusable voice (x-vector, and reference codes when `with_codes` or when the
  // family clones from codes alone), with `ref_text` (may be empty) as its transcript.
  Result<voice::Voice> create_voice(const ReferenceAudio& ref, const std::string& ref_text,
                                        bool with_codes = true) const;
  // Fills the request's voice fields from `voice` after checking that it suits this model; `label`
  // names the voice in errors. Without a transcript a Qwen3-TTS clone uses the x-vector alone,
  // and `note` says so.
  Status apply_voice(const voice::Voice& voice, const std::string& label, SynthesisRequest& r,
                     std::string* note = nullptr) const;

 private:
  friend Result<std::shared_ptr<const Model>> load(const std::string& spec, const LoadOptions& options);
  Model() = default;
  Device device_;
  WeightFormat weights_ = WeightFormat::kBf16;
  std::string dir_;
  ThreadPool* pool_ = nullptr;
  std::unique_ptr<TtsModel> generator_;
  std::unique_ptr<Codec> codec_;
};

// Resolves `spec` (a folder, or a Hugging Face id in the local cache), detects its family and loads
// generator and codec on options.device. Errors name the folder and what is wrong with it.
Result<std::shared_ptr<const Model>> load(const std::string& spec, const LoadOptions& options = {});

}  // namespace chorus::engine
