// Qwen3-TTS as a recipe of the frame core (models/frame_core/frame_core_cuda.h): the talker is the
// backbone, the code predictor the depth decoder (16 passes: two prompt rows, then one row per
// codebook, each followed by its head and the sampler; with a projection, the rows go through it
// first), and a frame's talker row is the sum of its codebooks' embeddings plus the stream's next
// trailing text row (or its pad row). No guidance branches. Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/frame_core/frame_core_cuda.h"
#include "models/qwen3_tts/device_model_cuda.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"

namespace chorus::qwen3_tts::gpu {

struct StreamSetup {
  const Prompt* prompt = nullptr;  // read during create() only
  GenerationSettings settings;
};

class FrameBatch : public frame_core::gpu::FrameCore {
 public:
  // Allocates every buffer (KV caches sized for each stream's prompt + max frames) and uploads the
  // prompts' trailing text rows and the sampler settings.
  static Result<std::unique_ptr<FrameBatch>> create(std::shared_ptr<const DeviceModel> model,
                                                    std::span<const StreamSetup> streams);
  ~FrameBatch() override;

  const DeviceModel& model() const { return *m_; }

  // The prompts through the talker (in chunks of streams) and codebook 0 of frame 0 for every slot.
  // Returns when next_c0() is valid.
  Status prefill(const std::vector<const Prompt*>& prompts);

  // A pool of `slots` free slots whose streams may use `positions` talker positions each (prompt
  // and frames); streams join with admit() between frames (continuous batching). With `pages`, the
  // talker's caches are paged (FrameCore::init_pool). every_row_tensor: FrameRecipe's.
  static Result<std::unique_ptr<FrameBatch>> create_pool(std::shared_ptr<const DeviceModel> model, int slots,
                                                         int64_t positions,
                                                         std::shared_ptr<nn::gpu::KvPagePool> pages = nullptr,
                                                         bool every_row_tensor = false);
  // Streams into free slots (each below active_slots()), with no frame in flight: their trailing
  // text, settings and prompts, and codebook 0 of their frame 0 (FrameCore::admit_slots).
  Status admit(std::span<const int> slots, std::span<const StreamSetup> streams);
  int64_t positions() const { return cap_; }

  // More trailing text rows for streams in a pool's slots (text that arrived after admission),
  // after the rows each slot holds; rows past a slot's positions are dropped (never read). Waits
  // for a frame in flight first: it may be reading the slots' row counts.
  struct TextAppend {
    int slot = 0;
    const float* rows = nullptr;  // [count, hidden]
    int64_t count = 0;
  };
  Status append_text(std::span<const TextAppend> appends);

 private:
  FrameBatch() = default;
  Status enqueue_depth(cudaStream_t s) override;
  Status backbone_inputs(cudaStream_t s) override;
  // A moved stream's pad row, text row count and its text rows so far.
  void add_slot_regions(frame_core::gpu::SlotRegions& r) const override;
  Status move_own_slots(std::span<const std::pair<int, int>> moves, cudaStream_t s) override;

  std::shared_ptr<const DeviceModel> m_;
  frame_core::gpu::FrameRecipe recipe() const;
  int B() const { return n_; }  // one sequence per slot; the active slots compute
  int64_t C_ = 0, CV_ = 0;
  int64_t text_stride_ = 0;  // a pool's trailing rows per slot (0: packed, a fixed batch)
  std::vector<int32_t> text_count_host_;  // a pool's text_count_, as uploaded
  cuda::DeviceBuffer xt_, xc_, logits_cp_, text_rows_, text_off_, text_count_, pad_;
};

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
