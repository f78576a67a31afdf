// The device-resident Qwen3-TTS frame loop for a batch of B streams stepped together.
//
// A frame runs entirely on the GPU, without host synchronisation: the code predictor's 16 passes
// (two prompt rows, then one row per codebook) each followed by its head and the sampler, then the
// talker step on the frame's embedding and the sampling of the next frame's codebook 0. The
// per-step values that change (positions, frame counters that address the random draws, the
// codes) live in device memory, so a frame is captured once into a CUDA graph and replayed. The
// whole frame is one graph, so programmatic dependent launch carries across the seam between the
// code predictor and the talker; the frame's codes are saved on the device at that seam, and the
// codes, the next codebook 0 and the error flags reach pinned host memory in one copy at the end
// (cuda::FramePipeline, which lets the caller launch the next frame before reading this one's).
// set_split_frames captures the two halves as two graphs instead, which times the talker and the
// code predictor apart.
//
// Streams are slots 0..B−1 fixed at creation. All slots always compute; the caller ignores
// finished ones (their positions are clamped inside their caches). Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/qwen3_tts/device_model_cuda.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/frame_pipeline.h"
#include "runtime/cuda/ops.h"

namespace chorus::qwen3_tts::gpu {

struct StreamSetup {
  const Prompt* prompt = nullptr;  // read during create() only
  GenerationSettings settings;
};

struct FrameTiming {
  // Device time of the last call. talker_ms is 0 when the frame had no talker step of its own: the
  // last frame (no feed), or one graph per frame, where the talker's time is inside code_predictor_ms.
  float prefill_ms = 0, code_predictor_ms = 0, talker_ms = 0;
};

class FrameBatch {
 public:
  // Allocates every buffer (KV caches sized for each stream's prompt + max frames) and uploads the
  // prompts' trailing text rows and the sampler settings.
  static Result<std::unique_ptr<FrameBatch>> create(std::shared_ptr<const DeviceModel> model,
                                                    std::span<const StreamSetup> streams);
  ~FrameBatch();

  int size() const { return B_; }
  const DeviceModel& model() const { return *m_; }

  // The prompts through the talker (in chunks of streams) and codebook 0 of frame 0 for every slot.
  // Returns when next_c0() is valid.
  Status prefill(const std::vector<const Prompt*>& prompts);
  // One frame for every slot; with feed, also the talker step and the next codebook 0. Returns when
  // frame_codes() (and next_c0() with feed) are valid. With `then`, the following frame (with feed =
  // *then) is launched before this one is waited for; the next call then waits for it instead of
  // launching (its feed may be true where that call's is false: the extra talker step is harmless).
  Status run_frame(bool feed, std::optional<bool> then = std::nullopt);
  // Two graphs per frame instead of one (engine::CudaLoadOptions::split_frames); same codes, but the
  // talker's device time is measured apart. Set before the first run_frame.
  void set_split_frames(bool split) { pipe_.set_split_halves(split); }

  const int32_t* frame_codes(int b) const { return shown() + b * G_; }
  int32_t next_c0(int b) const { return shown()[(B_ + b) * G_]; }
  int32_t error(int b) const { return shown()[2 * B_ * G_ + b]; }
  const FrameTiming& timing() const { return timing_; }
  size_t device_bytes() const { return bytes_; }

 private:
  FrameBatch() = default;
  // The report (device and pinned host alike): [frame codes, B×G | codes, B×G | errors, B]. The
  // samplers write the codes and errors; the frame codes are the codes as the code predictor left
  // them (the talker's sampler then overwrites codebook 0 with the next frame's).
  int32_t* frame_codes_dev() const { return report_.as<int32_t>(); }
  int32_t* codes_dev() const { return report_.as<int32_t>() + B_ * G_; }
  int32_t* errors_dev() const { return report_.as<int32_t>() + 2 * B_ * G_; }
  const int32_t* shown() const { return static_cast<const int32_t*>(pipe_.report()); }
  Status enqueue_code_predictor(cudaStream_t s);
  Status enqueue_talker(cudaStream_t s);
  Status sample_talker(cudaStream_t s);
  Status alloc(cuda::DeviceBuffer& b, size_t bytes);

  std::shared_ptr<const DeviceModel> m_;
  int B_ = 0, G_ = 0;
  int64_t H_ = 0, C_ = 0, V_ = 0, CV_ = 0, cap_ = 0, talker_rows_ = 0;
  cuda::Stream stream_;
  cuda::Event ev_[2];  // the prefill's start and end
  cuda::LinearWorkspace ws_;
  StackScratch talker_scratch_, cp_scratch_;
  cuda::DeviceBuffer talker_kv_, cp_kv_;
  cuda::DeviceBuffer talker_h_, talker_out_, z_, logits_t_, xt_, xc_, logits_cp_;
  cuda::DeviceBuffer scratch_w_, scratch_ids_;
  cuda::DeviceBuffer report_, frames_, prompt_rows_, talker_pos_, min_frames_, history_;
  cuda::DeviceBuffer params_t_, params_cp_, text_rows_, text_off_, text_count_, pad_;
  cuda::DeviceBuffer iota_, cp_first_seq_, cp_first_pos_, cp_pos_, prefill_seq_, prefill_pos_, last_row_;
  cuda::FramePipeline pipe_;
  FrameTiming timing_;
  size_t bytes_ = 0;
};

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
