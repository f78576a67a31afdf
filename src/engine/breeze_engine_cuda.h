// Breeze TTS 2 with generation on the GPU (models/breeze_tts/frame_batch_cuda.h) behind the engine
// interface; reached through load_tts_model (the registry dispatches on the family).
// Prompts: text segments through the GPU text encoder (text_encoder_cuda.h), frame rows on the CPU.
// Batching follows tts_model_cuda.h (continuous batching in frame pools): streams of every guidance
// mode share a pool, each branch in a slot of its own. Without CUDA these return kUnsupported.
#pragma once

#include <memory>
#include <string>

#include "core/error.h"
#include "engine/tts_model.h"
#include "engine/tts_model_cuda.h"

namespace chorus::engine {

Result<std::unique_ptr<TtsModel>> load_cuda_breeze_model(const std::string& dir, const CudaLoadOptions& options);

}  // namespace chorus::engine
