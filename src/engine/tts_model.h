// The family-agnostic engine interface: an immutable TtsModel creates per-request TtsStreams and
// advances any batch of its streams by one frame per step. CLI commands, the benchmark and (later)
// the server and GPU batching all go through it.
//
//   auto model = engine::load_tts_model(dir, {});
//   auto stream = (*model)->create_stream(request);
//   std::vector<engine::StepResult> out(1);
//   while (!(*stream)->finished()) (*model)->step({&stream_ptr, 1}, out);   // out[0].codes: one frame
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/request.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::engine {

enum class StopReason { kRunning, kEos, kMaxFrames };
const char* stop_reason_name(StopReason r);  // "running", "eos", "max-frames"

class TtsStream {
 public:
  virtual ~TtsStream() = default;
  virtual bool finished() const = 0;
  virtual StopReason stop_reason() const = 0;
  virtual int64_t frames() const = 0;        // frames produced so far
  virtual int64_t max_frames() const = 0;    // after the length cap
  virtual int64_t text_tokens() const = 0;   // of the target text
  virtual int64_t prompt_rows() const = 0;   // prefill length
  virtual size_t state_bytes() const = 0;    // caches and buffers held
};

struct StepResult {
  bool has_frame = false;
  std::vector<int32_t> codes;  // codebooks() codes when has_frame
};

// Wall time per stage, accumulated over steps. "backbone" is the talker, "depth" the code predictor
// (sampling included); sampling_s is codebook 0's sampling.
struct StageTimes {
  double prefill_s = 0, backbone_s = 0, depth_s = 0, sampling_s = 0;
};

struct ModelInfo {
  std::string family;   // "qwen3-tts"
  std::string variant;  // "custom_voice", ...
  int64_t codebooks = 0;
  double frame_rate = 0;     // frames per second of audio
  int64_t sample_rate = 0;
};

class TtsModel {
 public:
  virtual ~TtsModel() = default;
  virtual const ModelInfo& info() const = 0;
  // Checks the request against the model (errors name the bad field); prefill happens on the first step.
  virtual Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& request) const = 0;
  // Advances every unfinished stream by one frame; out[i] receives stream i's frame if it made one.
  // Streams must come from this model. On failure, drop the streams of this batch.
  virtual Status step(std::span<TtsStream* const> streams, std::span<StepResult> out,
                      StageTimes* times = nullptr) const = 0;
};

// How the CPU models keep the decoder layers of generation (talker / code predictor, backbone /
// depth decoder): kBf16 as stored, the exact mode; kInt8 / kInt4 quantised at load (weight-only,
// groups of 32 with f16 scales; runtime/cpu/quant.h, docs/quantization.md).
using WeightFormat = cpu::WeightFormat;

struct LoadOptions {
  ThreadPool* pool = nullptr;  // kernels' threads (nullptr: ThreadPool::global()); must outlive the model
  WeightFormat weights = WeightFormat::kBf16;
};

// Detects the family of the checkpoint folder and loads it.
Result<std::unique_ptr<TtsModel>> load_tts_model(const std::string& dir, const LoadOptions& options = {});

}  // namespace chorus::engine
