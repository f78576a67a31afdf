// Breeze TTS 2 as a recipe of the frame core (models/frame_core/frame_core_cuda.h). A fixed batch
// has NB guidance branches per stream (every stream the same number; sequence q = s·NB + j). A pool
// mixes guidance modes: each slot holds one branch, a stream's 1–3 branches take adjacent slots,
// and every slot of a stream samples the same codes from the same combined logits (Guide::branch).
// Per frame:
//   depth:    15 steps; step 1 feeds [W_in·h, W_in·E_0(c0)] at positions 0, 1 of every branch's
//             16-slot depth cache, step k >= 2 feeds W_in·E_{k−1}(c_{k−1}) at position k; after each
//             step head k − 1 on every branch, the guidance combination, and the sampler (reserved
//             ids masked) → c_k. The frame counters and positions advance, and the same kernel saves
//             the frame's codes on the device.
//   backbone: every branch's input row Σ_k E_k(c_k), one backbone step per branch, lm_head, the
//             guidance combination and the sampler of the next codebook 0 (repetition penalty over
//             the stream's earlier codebook-0 ids, codec codes or the EOS class, EOS masked before
//             min_frames).
// Random draws are addressed (seed, stream, frame, codebook) as on the CPU. Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/breeze_tts/device_model_cuda.h"
#include "models/breeze_tts/frame_kernels_cuda.h"
#include "models/breeze_tts/text_encoder.h"
#include "models/frame_core/frame_core_cuda.h"
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

class FrameBatch : public frame_core::gpu::FrameCore {
 public:
  // Allocates every buffer (backbone caches sized for each branch's prompt + max frames) and uploads
  // the settings; the prompts are read by prefill().
  static Result<std::unique_ptr<FrameBatch>> create(std::shared_ptr<const DeviceModel> model,
                                                    std::span<const StreamSetup> streams);

  // Every branch's prompt through the backbone (in chunks of rows) and codebook 0 of frame 0.
  Status prefill(std::span<const StreamSetup> streams);

  // A pool of `slots` free slots for streams of activations `act`, one slot per guidance branch,
  // each with `positions` backbone positions (prompt and frames); streams of any guidance mode join
  // with admit() between frames (continuous batching). With `pages`, the backbone caches are paged
  // (FrameCore::init_pool). every_row_tensor: FrameRecipe's.
  static Result<std::unique_ptr<FrameBatch>> create_pool(std::shared_ptr<const DeviceModel> model, int slots,
                                                         Activations act, int64_t positions,
                                                         std::shared_ptr<nn::gpu::KvPagePool> pages = nullptr,
                                                         bool every_row_tensor = false);
  // Streams into free slots, with no frame in flight (FrameCore::admit_slots): stream i's branches
  // into slots[i], slots[i] + 1, ... (all below active_slots()); their activations must be the pool's.
  Status admit(std::span<const int> slots, std::span<const StreamSetup> streams);
  int64_t positions() const { return cap_; }

  const DeviceModel& model() const { return *m_; }
  ~FrameBatch() override;

  // For tests: the raw (unguided) logits of the last backbone step, [S·NB, classes], and of the last
  // frame's depth steps, [G − 1, S·NB, vocab].
  Result<std::vector<float>> backbone_logits() const;
  Result<std::vector<float>> depth_logits() const;
  // The backbone's final-norm hidden state of each branch's last row, [S·NB, hidden] (the input of
  // lm_head and of the next depth walk).
  Result<std::vector<float>> backbone_hidden() const;

 private:
  FrameBatch() = default;
  Status enqueue_depth(cudaStream_t s) override;
  Status backbone_inputs(cudaStream_t s) override;
  Result<float*> combine_backbone(float* logits, cudaStream_t s) override;
  // A moved slot's guidance (its branch keeps its place in its stream's run of slots).
  void add_slot_regions(frame_core::gpu::SlotRegions& r) const override { r.add(guides_.data(), sizeof(Guide)); }
  Result<std::vector<float>> download(const cuda::DeviceBuffer& b, int64_t floats) const;
  // Whether frames combine branches: a fixed batch with guidance, or a pool once a guided stream
  // joined (from then on, as unguided slots' combination is a copy).
  bool guides() const { return NB_ > 1 || guided_; }
  frame_core::gpu::FrameRecipe recipe() const;
  Status alloc_own();  // this recipe's buffers, for S_ slots of NB_ branches

  std::shared_ptr<const DeviceModel> m_;
  int64_t D_ = 0, C_ = 0, V_ = 0;
  bool bf16_ = false;  // the batch's activations (StreamSetup::act)
  bool pool_ = false;
  bool guided_ = false;  // a pool that admitted a guided stream
  cuda::DeviceBuffer guided_b_, din_, dx_, dout_, logits_d_, guided_d_, guides_;
};

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
