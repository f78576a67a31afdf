// Generation on the GPU behind the engine interface (tts_model.h). Prompts are still built on the
// CPU (tokenizer, text embedding); the talker, the code predictor and sampling run on the device
// (models/qwen3_tts/frame_batch_cuda.h). Declared in every build; without CUDA the functions
// return kUnsupported.
//
// Batching: the streams passed to the first step() of any of them form one device batch (weights
// read once per step for all of them). Later steps must pass every unfinished stream of that batch
// (finished ones may be left out); mixing batches or adding streams later is kUnsupported.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/request.h"
#include "engine/tts_model.h"

namespace chorus::engine {

bool cuda_built();

struct CudaLoadOptions {
  int device = 0;
  ThreadPool* pool = nullptr;  // CPU threads for prompt building (nullptr: ThreadPool::global())
  // Each frame as two graphs (the depth walk, then the backbone step) instead of one, so StageTimes
  // gives their device times apart (`chorus bench --split-frames`); a little slower.
  bool split_frames = false;
};

// A Qwen3-TTS checkpoint with generation on the GPU.
Result<std::unique_ptr<TtsModel>> load_cuda_tts_model(const std::string& dir, const CudaLoadOptions& options = {});

// `chorus bench --device cuda`: single-stream per-frame costs (talker / code predictor on the GPU,
// codec on the CPU), time to first frame and to first audio, peak GPU memory, then the step time
// and aggregate real-time streams for each batch size. `request(seed, frames)` makes the requests.
struct CudaBenchOptions {
  std::string model;
  int64_t frames = 250;
  int64_t warmup = 5;
  std::vector<int64_t> batches = {1};
  int64_t batch_frames = 100;  // frames per stream in the batch runs
  bool split_frames = false;   // CudaLoadOptions::split_frames
  bool stack_trace = false;    // the persistent decode kernel's per-phase times (cuda::decode_stack_enable_trace)
};
Result<std::string> cuda_bench(const CudaBenchOptions& o,
                               const std::function<SynthesisRequest(uint64_t seed, int64_t frames)>& request);

}  // namespace chorus::engine
