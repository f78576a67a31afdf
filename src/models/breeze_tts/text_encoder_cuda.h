// The T5Gemma2 text encoder of Breeze TTS 2 on the GPU: the device counterpart of TextEncoder
// (text_encoder.h), with the same f32 and bf16-activation modes. Weights are uploaded once as bf16
// (immutable, shared by every request); activations are f32 on the device. All text segments of a
// request (every guidance branch's) are packed into one batch of rows and encoded in one pass:
// positions restart at 0 in each segment and attention never crosses segments. Matrix products go
// through cuda::linear (cuBLAS on tensor cores for more than a few rows), the Gemma pieces through
// runtime/cuda/encoder_ops.h. Built only with CUDA (CHORUS_HAVE_CUDA).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/prompt.h"
#include "models/breeze_tts/text_encoder.h"
#include "nn/device_stack_cuda.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/encoder_ops.h"
#include "runtime/cuda/ops.h"

namespace chorus::breeze_tts::gpu {

class TextEncoderCuda {
 public:
  // Checks the encoder's weights (declare_text_encoder_weights) and uploads them.
  static Result<std::unique_ptr<TextEncoderCuda>> upload(const Config& c, const io::Checkpoint& ckpt);

  // Every segment in one pass; per segment the output after the final norm [L, text hidden], or
  // projected to the backbone width [L, hidden] when `project`. Segment checks as TextEncoder::encode.
  // Thread-safe (calls are serialised on the encoder's stream and scratch).
  Result<std::vector<Tensor>> encode(std::span<const std::vector<int32_t>> segments, Activations act,
                                     bool project) const;

  const TextEncoderConfig& config() const { return cfg_; }
  size_t weight_bytes() const { return bytes_; }

 private:
  using DeviceTensor = nn::gpu::DeviceTensor;
  struct Layer {
    bool full = false;
    DeviceTensor q, k, v, o, gate, up, down;
    DeviceTensor pre_attn, post_attn, pre_ff, post_ff, q_norm, k_norm, inv_freq;  // f32; norms as 1 + w
  };
  // Device activations for up to `rows` packed rows, grown on demand.
  struct Scratch {
    int64_t rows = 0;
    cuda::DeviceBuffer x, n, q, k, v, a, o, g, u, y, meta;
    std::unique_ptr<cuda::LinearWorkspace> linear;
  };
  Status reserve(int64_t rows) const;
  Status run_layer(const Layer& l, cuda::PackedRows pr, int64_t longest, bool rnd) const;

  TextEncoderConfig cfg_;
  int64_t vocab_ = 0, out_hidden_ = 0;
  DeviceTensor embed_, proj_, eoi_row_, final_norm_;
  std::vector<Layer> layers_;
  size_t bytes_ = 0;
  cuda::Stream stream_;
  mutable std::mutex mu_;
  mutable Scratch scratch_;
};

// prompt_rows (prompt.h) for the layouts of one request (one per guidance branch), with every text
// segment of every layout encoded in one GPU pass; audio rows are summed on the host as there.
Result<std::vector<Tensor>> prompt_rows_cuda(const Config& c, std::span<const PromptLayout> layouts, const RefCodes& ref,
                                             const TextEncoderCuda& encoder, const Tensor& audio_table,
                                             Activations act = Activations::kF32);

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
