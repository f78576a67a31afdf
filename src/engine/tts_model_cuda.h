// Generation on the GPU behind the engine interface (tts_model.h). Prompts are still built on the
// CPU (tokenizer, text embedding); the talker, the code predictor and sampling run on the device
// (models/qwen3_tts/frame_batch_cuda.h). Declared in every build; without CUDA the functions
// return kUnsupported.
//
// Batching: streams run in device frame pools that they join and leave between frames (weights read
// once per step for all of a pool's streams; engine/frame_pools.h). A step must pass every
// unfinished stream of the pools it touches, except streams waiting for input (Qwen3-TTS text in
// pieces, TtsStream::ready() false), which sit the step out in their slots.
#pragma once

#include <memory>
#include <string>

#include "core/error.h"
#include "engine/request.h"
#include "engine/tts_model.h"

namespace chorus::engine {

bool cuda_built();

struct CudaLoadOptions {
  int device = 0;
  ThreadPool* pool = nullptr;  // CPU threads for prompt building (nullptr: ThreadPool::global())
  bool split_frames = false;  // LoadOptions::split_frames
  size_t kv_cache_bytes = 0;  // LoadOptions::kv_cache_bytes
  int first_pool_slots = 8;   // LoadOptions::first_pool_slots
  bool batch_invariant = false;  // LoadOptions::batch_invariant
  // The decoder layers' weights: bf16 as stored, or int8 / fp8 quantised at load (LoadOptions::weights;
  // int4 is kUnsupported on CUDA).
  WeightFormat weights = WeightFormat::kBf16;
};

// A Qwen3-TTS checkpoint folder with generation on the GPU (the registry's CUDA loader).
Result<std::unique_ptr<TtsModel>> load_cuda_qwen3_model(const std::string& dir, const CudaLoadOptions& options);

}  // namespace chorus::engine
