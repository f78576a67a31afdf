// The device-resident Breeze TTS 2 frame loop for a batch of S streams with NB guidance branches
// each (every stream of a batch has the same number of branches; sequence q = s·NB + j).
//
// A frame runs on the GPU without host synchronisation, as one CUDA graph captured once:
//   depth:    15 steps; step 1 feeds [W_in·h, W_in·E_0(c0)] at positions 0, 1 of every branch's
//             16-slot depth cache, step k >= 2 feeds W_in·E_{k−1}(c_{k−1}) at position k; after each
//             step head k − 1 on every branch, the guidance combination, and the sampler (reserved
//             ids masked) → c_k. The frame counters and positions advance, and the same kernel saves
//             the frame's codes on the device (so the seam to the backbone stays kernel to kernel,
//             and programmatic dependent launch carries across it).
//   backbone: every branch's input row Σ_k E_k(c_k), one backbone step per branch, lm_head, the
//             guidance combination and the sampler of the next codebook 0 (repetition penalty over
//             the stream's earlier codebook-0 ids, codec codes or the EOS class, EOS masked before
//             min_frames).
// Then one copy brings the report (frame codes, next codebook 0, error flags) to pinned host memory
// (cuda::FramePipeline, which lets the caller launch the next frame before reading this one's).
// set_split_frames captures the two halves as two graphs instead, to time them apart; the last
// frame (no feed) runs the depth half alone.
// Random draws are addressed (seed, stream, frame, codebook) as on the CPU; the frame counters live
// on the device, so the graphs replay unchanged. All slots always compute; finished streams' codes
// are ignored by the caller (their positions are clamped inside their caches). Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/breeze_tts/device_model_cuda.h"
#include "models/breeze_tts/frame_kernels_cuda.h"
#include "models/breeze_tts/text_encoder.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/frame_pipeline.h"
#include "runtime/cuda/ops.h"
#include "sampling/sampler.h"

namespace chorus::breeze_tts::gpu {

struct StreamSetup {
  // The prefill rows of each branch, in the guidance order (generation.h), each [rows, hidden].
  std::vector<const Tensor*> branches;
  Guide guide;                     // mode must match the branch count (1, 2 or 3)
  sampling::SamplerParams backbone, depth;  // the depth sampler's repetition penalty is ignored
  int64_t max_frames = 0;          // >= 1, already capped by the backbone context
  int64_t min_frames = 0;
  uint64_t seed = 0;
  uint32_t rng_stream = 0;
  // kBF16: the backbone and depth stacks and the depth projector store bf16 activations as the CPU
  // generation does (nn::Rounding::kBF16); lm_head and the depth heads stay f32. The prompt rows
  // must have been built with the same mode. Every stream of a batch must use the same mode.
  Activations act = Activations::kF32;
};

struct FrameTiming {
  // Device time of the last call. backbone_ms is 0 when the frame had no backbone step of its own:
  // the last frame (no feed), or one graph per frame, where the backbone's time is inside depth_ms.
  float prefill_ms = 0, depth_ms = 0, backbone_ms = 0;
};

class FrameBatch {
 public:
  // Allocates every buffer (backbone caches sized for each branch's prompt + max frames) and uploads
  // the settings; the prompts are read by prefill().
  static Result<std::unique_ptr<FrameBatch>> create(std::shared_ptr<const DeviceModel> model,
                                                    std::span<const StreamSetup> streams);
  ~FrameBatch();

  int size() const { return S_; }
  int branches() const { return NB_; }
  const DeviceModel& model() const { return *m_; }

  // Every branch's prompt through the backbone (in chunks of rows) and codebook 0 of frame 0.
  Status prefill(std::span<const StreamSetup> streams);
  // The depth walk of the current frame; with feed, also the backbone step and the next codebook 0.
  // Returns when frame_codes() (and next_c0() with feed) are valid. With `then`, the following frame
  // (with feed = *then) is launched before this one is waited for; the next call then waits for it
  // instead of launching (its feed may be true where that call's is false: the extra backbone step
  // is harmless). While a frame is ahead, the test accessors below see that frame.
  Status run_frame(bool feed, std::optional<bool> then = std::nullopt);
  // Two graphs per frame instead of one (engine::CudaLoadOptions::split_frames); same codes, but the
  // backbone's device time is measured apart. Set before the first run_frame.
  void set_split_frames(bool split) { pipe_.set_split_halves(split); }

  const int32_t* frame_codes(int s) const { return shown() + s * G_; }
  int32_t next_c0(int s) const { return shown()[(S_ + s) * G_]; }
  int32_t error(int s) const { return shown()[2 * S_ * G_ + s]; }
  const FrameTiming& timing() const { return timing_; }
  size_t device_bytes() const { return bytes_; }

  // For tests: the raw (unguided) logits of the last backbone step, [S·NB, classes], and of the last
  // frame's depth steps, [G − 1, S·NB, vocab].
  Result<std::vector<float>> backbone_logits() const;
  Result<std::vector<float>> depth_logits() const;
  // The backbone's final-norm hidden state of each branch's last row, [S·NB, hidden] (the input of
  // lm_head and of the next depth walk).
  Result<std::vector<float>> backbone_hidden() const;

 private:
  FrameBatch() = default;
  // The report (device and pinned host alike): [frame codes, S×G | codes, S×G | errors, S]. The
  // samplers write the codes and errors; the frame codes are the codes as the depth walk left them
  // (the backbone's sampler then overwrites codebook 0 with the next frame's).
  int32_t* frame_codes_dev() const { return report_.as<int32_t>(); }
  int32_t* codes_dev() const { return report_.as<int32_t>() + S_ * G_; }
  int32_t* errors_dev() const { return report_.as<int32_t>() + 2 * S_ * G_; }
  const int32_t* shown() const { return static_cast<const int32_t*>(pipe_.report()); }
  Status enqueue_depth(cudaStream_t s);
  Status enqueue_backbone(cudaStream_t s);
  Status sample_backbone(cudaStream_t s);
  Status alloc(cuda::DeviceBuffer& b, size_t bytes);

  std::shared_ptr<const DeviceModel> m_;
  int S_ = 0, NB_ = 0, Q_ = 0, G_ = 0;
  int64_t H_ = 0, D_ = 0, C_ = 0, V_ = 0, cap_ = 0, bb_rows_ = 0;
  bool bf16_ = false;  // the batch's activations (StreamSetup::act)
  cuda::Stream stream_;
  cuda::Event ev_[2];  // the prefill's start and end
  cuda::LinearWorkspace ws_;
  qwen3_tts::gpu::StackScratch bb_scratch_, depth_scratch_;
  cuda::DeviceBuffer bb_kv_, depth_kv_;
  cuda::DeviceBuffer bb_h_, bb_out_, z_, logits_b_, guided_b_, din_, dx_, dout_, logits_d_, guided_d_;
  cuda::DeviceBuffer scratch_w_, scratch_ids_;
  cuda::DeviceBuffer report_, frames_, prompt_rows_, bb_pos_, min_frames_, history_, guides_;
  cuda::DeviceBuffer params_b_, params_d_, iota_, first_seq_, first_pos_, depth_pos_, prefill_seq_, prefill_pos_,
      last_row_;
  cuda::FramePipeline pipe_;
  FrameTiming timing_;
  size_t bytes_ = 0;
};

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
