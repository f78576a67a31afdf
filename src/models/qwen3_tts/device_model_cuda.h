// Qwen3-TTS weights on the GPU: the talker and code-predictor stacks (bf16 matrices, or int8 / fp8
// projections quantised at load; f32 norm weights), the codec embeddings and heads (bf16). Immutable after upload and shared by every batch of
// streams; the per-stream state (KV caches, counters) lives in FrameBatch (frame_batch_cuda.h).
// Built only with CUDA (CHORUS_HAVE_CUDA).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "models/qwen3_tts/model.h"
#include "nn/device_stack_cuda.h"

namespace chorus::qwen3_tts::gpu {

using nn::gpu::DeviceStack;
using nn::gpu::DeviceTensor;
using nn::gpu::KvCacheRef;
using nn::gpu::StackScratch;

class DeviceModel {
 public:
  const Model& cpu() const { return *cpu_; }
  const DeviceStack& talker() const { return talker_; }
  const DeviceStack& code_predictor() const { return cp_; }
  int64_t hidden() const { return talker_.dims().hidden; }       // talker width
  int64_t cp_hidden() const { return cp_.dims().hidden; }
  int64_t vocab() const { return codec_head_.rows; }              // talker codec vocabulary
  int64_t cp_vocab() const { return cp_heads_.empty() ? 0 : cp_heads_[0].rows; }
  int groups() const { return static_cast<int>(cp_heads_.size()) + 1; }
  const DeviceTensor& codec_embedding() const { return codec_embedding_; }
  const DeviceTensor& codec_head() const { return codec_head_; }
  const DeviceTensor& cp_embedding(int k) const { return cp_embeddings_[static_cast<size_t>(k - 1)]; }  // k >= 1
  const DeviceTensor& cp_head(int k) const { return cp_heads_[static_cast<size_t>(k)]; }                // k >= 0
  bool has_projection() const { return !proj_w_.empty(); }
  const DeviceTensor& projection() const { return proj_w_; }
  const DeviceTensor& projection_bias() const { return proj_b_; }
  // With a projection: codebook k's embedding table already projected, [cp vocab, cp_hidden] f32
  // (k >= 1), so that a depth step's input needs no matrix product; null without one.
  const float* cp_projected_embedding(int k) const {
    return cp_projected_.empty() ? nullptr : cp_projected_[static_cast<size_t>(k - 1)].as<const float>();
  }
  // Device array of groups() table pointers: the codec embedding, then codebooks 1..G−1.
  const uint16_t* const* embedding_tables() const { return tables_.as<const uint16_t* const>(); }
  size_t weight_bytes() const { return bytes_; }
  int32_t eos_id() const { return eos_id_; }
  // Talker ids at or above this are masked when sampling codebook 0 (except EOS), as stream.cpp.
  int64_t allowed_below() const { return allowed_below_; }

 private:
  std::shared_ptr<const Model> keep_;
  const Model* cpu_ = nullptr;
  DeviceStack talker_, cp_;
  DeviceTensor codec_embedding_, codec_head_, proj_w_, proj_b_;
  std::vector<DeviceTensor> cp_embeddings_, cp_heads_;
  std::vector<cuda::DeviceBuffer> cp_projected_;
  cuda::DeviceBuffer tables_;
  size_t bytes_ = 0;
  int32_t eos_id_ = 0;
  int64_t allowed_below_ = 0;
  friend Result<std::shared_ptr<const DeviceModel>> upload_model(std::shared_ptr<const Model>, cpu::WeightFormat,
                                                                  ThreadPool*);
  Status project_cp_embeddings();
};

// Keeps `model` alive as long as the device copy. `weights`: how the two stacks' projections are
// kept on the device (nn::gpu::StackOptions::weights; `pool` quantises them), whatever the CPU
// model holds: the device copy is made from the checkpoint's tensors.
Result<std::shared_ptr<const DeviceModel>> upload_model(std::shared_ptr<const Model> model,
                                                        cpu::WeightFormat weights = cpu::WeightFormat::kBf16,
                                                        ThreadPool* pool = nullptr);

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
