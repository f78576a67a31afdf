// A loaded Qwen3-TTS checkpoint: configuration and the generation stages (talker, code predictor).
// Immutable after load and safe to share between threads; everything that changes during
// generation lives in a Stream (stream.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/code_predictor.h"
#include "models/qwen3_tts/talker.h"

namespace chorus::qwen3_tts {

class Model {
 public:
  // Opens and validates the folder (open_model_files), then builds the stages. `pool` runs the
  // kernels (nullptr: the calling thread only); it must outlive the model. `weights` chooses how
  // the talker's and code predictor's decoder layers are kept (bf16: as stored, the exact mode;
  // int8 / int4: quantised at load, runtime/cpu/quant.h).
  static Result<std::shared_ptr<const Model>> load(const std::string& dir, ThreadPool* pool,
                                                   cpu::WeightFormat weights = cpu::WeightFormat::kBf16);
  static Result<std::shared_ptr<const Model>> from_files(ModelFiles files, ThreadPool* pool,
                                                         cpu::WeightFormat weights = cpu::WeightFormat::kBf16);

  const Config& config() const { return files_.config; }
  const ModelFiles& files() const { return files_; }
  const Talker& talker() const { return talker_; }
  const CodePredictor& code_predictor() const { return code_predictor_; }
  ThreadPool* pool() const { return pool_; }
  cpu::WeightFormat weight_format() const { return talker_.stack().weight_format(); }
  int64_t hidden() const { return talker_.hidden(); }
  int64_t groups() const { return code_predictor_.groups(); }

  // F = CE(c0) + Σ_{k≥1} CPE_k(c_k) of a full frame (groups() codes) → out[hidden].
  Status frame_embedding(std::span<const int32_t> codes, float* out) const;

 private:
  Model() = default;
  ModelFiles files_;
  Talker talker_;
  CodePredictor code_predictor_;
  ThreadPool* pool_ = nullptr;
};

}  // namespace chorus::qwen3_tts
