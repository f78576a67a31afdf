// Breeze TTS 2 weights on the GPU: the backbone (Qwen3 stack with q/k norm) and lm_head, the depth
// decoder (Llama stack without q/k norm, llama3-scaled RoPE), its input projector and 15 heads, and
// the shared audio table. The two stacks' projections are bf16 or int8 / fp8 quantised at load; the
// rest is bf16. Immutable after upload and shared by every batch; per-batch state lives in
// FrameBatch (frame_batch_cuda.h). The text encoder stays on the CPU (once per request). Built only
// with CUDA (CHORUS_HAVE_CUDA).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/frame_kernels_cuda.h"
#include "nn/device_stack_cuda.h"

namespace chorus::breeze_tts::gpu {

using nn::gpu::DeviceStack;
using nn::gpu::DeviceTensor;

class DeviceModel {
 public:
  // `main` is the checked main checkpoint (ModelFiles::main), read during the call only. `weights`:
  // how the stacks' projections are kept (nn::gpu::StackOptions::weights; `pool` quantises them).
  static Result<std::shared_ptr<const DeviceModel>> upload(const Config& c, const io::Checkpoint& main,
                                                           cpu::WeightFormat weights = cpu::WeightFormat::kBf16,
                                                           ThreadPool* pool = nullptr);

  const Config& config() const { return config_; }
  const DeviceStack& backbone() const { return backbone_; }
  const DeviceStack& depth() const { return depth_; }
  const DeviceTensor& lm_head() const { return lm_head_; }      // [V + 1, hidden]
  const DeviceTensor& projector() const { return projector_; }  // [depth hidden, audio embed]
  const DeviceTensor& head(int64_t k) const { return heads_[static_cast<size_t>(k)]; }  // predicts codebook k + 1
  AudioTable table() const { return {table_.bf16(), config_.audio_vocab, config_.audio_embed}; }
  int64_t hidden() const { return backbone_.dims().hidden; }
  int64_t depth_hidden() const { return depth_.dims().hidden; }
  int64_t classes() const { return lm_head_.rows; }  // audio vocab + EOS class
  int64_t vocab() const { return config_.audio_vocab; }
  int codebooks() const { return static_cast<int>(config_.num_codebooks); }
  // Codebook k's audio-table rows (1 <= k <= codebooks − 2) through the depth projector, f32,
  // [head(k − 1).rows, depth hidden] (ids past the table's codes: zero rows, as the table gather
  // gives), so that a single-branch depth step k + 1 takes its input row from step k's sampler.
  const float* projected_depth_rows(int k) const { return projected_[static_cast<size_t>(k - 1)].as<const float>(); }
  size_t weight_bytes() const { return bytes_; }

 private:
  Config config_;
  DeviceStack backbone_, depth_;
  DeviceTensor lm_head_, projector_, table_;
  std::vector<DeviceTensor> heads_;
  std::vector<cuda::DeviceBuffer> projected_;
  size_t bytes_ = 0;
};

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
