// The device-resident frame loop of every codec LM, for a batch of S slots with NB sequences each
// (sequence q = s·NB + j): a fixed batch holds a stream per slot, its NB guidance branches (NB = 1
// without guidance); a pool holds one sequence per slot (NB = 1), a guided stream taking a slot per
// branch.
//
// A backbone predicts codebook 0 of a frame, a depth decoder the other G − 1 codebooks. A frame runs
// on the GPU without host synchronisation, in two halves: the depth walk (G − 1 steps into a
// per-frame depth cache, each a head, an optional guidance combination and the sampler), then, with
// feed, the backbone step on the frame's input row and the sampling of the next codebook 0. The
// per-step values that change (positions, the frame counters that address the random draws, the
// codes) live in device memory, so a frame is captured once into a CUDA graph and replayed
// (cuda::FramePipeline: one graph per frame, or two with split halves; the report of frame codes,
// next codebook 0 and error flags reaches pinned host memory in one copy at the end).
//
// FrameCore owns what every family shares: the slots, the backbone and depth KV caches, the
// backbone's activations, the report, the counters and positions, the sampler parameters on the
// device, the chunked prefill and the backbone head + sampler. A family derives from it and
// supplies the recipe: its stacks and dimensions (FrameRecipe), the depth walk (enqueue_depth), the
// backbone's input rows for a frame (backbone_inputs) and, with guidance, how the branches' logits
// combine (combine_backbone). All active slots always compute; finished streams' codes are ignored
// by the caller (their positions are clamped inside their caches).
//
// A stream that waits for input (Qwen3-TTS text that has not arrived) keeps its slot but must not
// advance: its slot is parked (set_parked_slots). The frames still compute it, like a free slot of
// the bucket, so their graphs and the other slots' results do not change; the core saves the
// slot's state before the frame and puts it back after, outside the graph. Parking lives in the
// core, once for every family, because the state a frame advances is the core's (codes, counters,
// positions, penalty history, the backbone's last output row); a recipe's own per-slot buffers
// are only read by frames (text rows, guidance settings) or are per-frame scratch.
//
// A batch is either fixed (init: its streams start together) or a pool (init_pool: streams join
// free slots between frames and leave when they end; continuous batching). A pool given a page pool
// keeps its backbone caches in pages that its streams take as they grow (KvPaging; nn/kv_pages.h
// gives the admission rule); a fixed batch, or a pool without one, holds every slot's whole
// capacity in one contiguous buffer. Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "models/frame_core/frame_kernels_cuda.h"
#include "models/frame_core/kv_paging_cuda.h"
#include "nn/device_stack_cuda.h"
#include "nn/kv_page_pool_cuda.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/frame_pipeline.h"
#include "runtime/cuda/ops.h"
#include "sampling/sampler.h"

namespace chorus::frame_core::gpu {

using nn::gpu::DeviceStack;
using nn::gpu::KvCacheRef;
using nn::gpu::StackScratch;

// What the core needs to know of a family's model and of the batch.
struct FrameRecipe {
  const DeviceStack* backbone = nullptr;
  const DeviceStack* depth = nullptr;
  cuda::DeviceMatrix backbone_head;   // hidden → backbone vocabulary (codebook 0 and its EOS)
  int codebooks = 0;                  // G
  int64_t depth_hidden = 0;           // width of the depth decoder's rows
  int64_t depth_vocab = 0;            // ids of codebooks 1..G−1
  int64_t allowed_below = 0;          // codebook-0 ids at or above this are masked, except eos
  int32_t eos = 0;                    // also masked before a stream's min_frames
  int depth_pos_first = 0;            // the position of depth step index 0 (see step_map)
  bool bf16 = false;                  // the stacks' bf16-activation mode (DeviceStack::forward)
  // Linear layers on the tensor-core kernel at every row count (cuda::LinearWorkspace).
  bool every_row_tensor = false;
};

// One slot's per-stream values.
struct SlotSetup {
  std::vector<int64_t> prompt_rows;   // per branch, >= 1
  int64_t min_frames = 0;             // already clamped by the family
  sampling::SamplerParams backbone, depth;
  bool depth_penalty = true;          // false: the depth sampler's repetition penalty is ignored
  uint64_t seed = 0;
  uint32_t rng_stream = 0;
};

// One sequence's prompt rows for the prefill, [rows, hidden] f32.
struct SeqRows {
  const float* data = nullptr;
  int64_t rows = 0;
};

struct FrameTiming {
  // Device time of the last call. backbone_ms is 0 when the frame had no backbone step of its own:
  // the last frame (no feed), or one graph per frame, where the backbone's time is inside depth_ms.
  float prefill_ms = 0, depth_ms = 0, backbone_ms = 0;
};

class FrameCore {
 public:
  virtual ~FrameCore();
  FrameCore(const FrameCore&) = delete;
  FrameCore& operator=(const FrameCore&) = delete;

  int size() const { return S_; }
  int branches() const { return NB_; }
  // The leading slots a frame computes (all of them unless set; a pool computes only up to its last
  // occupied slot, rounded to a bucket; move_slots fills the holes below it). Each count keeps its
  // own frame graphs.
  void set_active_slots(int n);
  int active_slots() const { return n_; }
  // A frame launched ahead whose report has not been read (run_frame with `then`).
  bool frame_ahead() const { return pipe_.frame_ahead(); }
  // Frame graphs captured so far (each active count and variant captures its own at first use).
  int64_t graphs_captured() const { return pipe_.graphs_captured(); }
  // Waits for a frame launched ahead whose streams have all left (before admit_slots); a paged
  // pool's pages that only such a frame could still write go back.
  Status settle() {
    CHORUS_TRY(pipe_.settle());
    return kv_ ? kv_->reclaim(pipe_.waited()) : ok_status();
  }

  // The depth walk of the current frame; with feed, also the backbone step and the next codebook 0.
  // Returns when frame_codes() (and next_c0() with feed) are valid. With `then`, the following frame
  // (with feed = *then) is launched before this one is waited for; the next call then waits for it
  // instead of launching (its feed may be true where that call's is false: the extra backbone step
  // is harmless). While a frame is ahead, the test accessors see that frame.
  Status run_frame(bool feed, std::optional<bool> then = std::nullopt);
  // Launches the current frame (with `feed`) and returns without waiting for it; the next run_frame
  // waits for it. With no frame in flight and no slot parked (kInternal otherwise): after admit_slots,
  // so the newcomers' first frame and the others' next one run while the host decodes the last.
  Status launch_frame_ahead(bool feed);
  // Two graphs per frame instead of one (engine::CudaLoadOptions::split_frames); same
  // codes, but the backbone's device time is measured apart. Set before the first run_frame.
  void set_split_frames(bool split) { pipe_.set_split_halves(split); }

  // Slots whose streams sit out the frames run from now on, until the next call (they wait for
  // input): each such frame leaves their codes, frame counters, positions, penalty histories and
  // backbone output rows as it found them, so their next frame is the one they would have made.
  // Their reported codes mean nothing. The backbone cache row such a frame writes for them is the
  // one their real frame writes again before reading it. Never with a frame launched ahead
  // (kInternal). Costs nothing while no slot is parked.
  Status set_parked_slots(std::span<const int> slots);
  const std::vector<int32_t>& parked_slots() const { return parked_; }

  // Streams of a paged pool move to free slots (from, to), with no frame in flight and no slot
  // parked: each takes its whole state along (counters, sampler settings, penalty history, the
  // backbone's last output row, codebook 0 of its next frame, its page table rows and the recipe's
  // own per-slot state), so its next frame is the one it would have made where it was. No slot may
  // be both a source and a destination. The frames then need compute only the leading slots
  // (engine/frame_pools.h compacts a pool this way).
  Status move_slots(std::span<const std::pair<int, int>> moves);

  const int32_t* frame_codes(int s) const { return shown() + s * G_; }
  int32_t next_c0(int s) const { return shown()[(S_ + s) * G_]; }
  int32_t error(int s) const { return shown()[2 * S_ * G_ + s]; }
  // error(s) as a Status: the sampler's complaint about slot s, if any.
  Status slot_status(int s) const;
  const FrameTiming& timing() const { return times_; }
  size_t device_bytes() const { return bytes_; }

  // Paged pools: the pages a stream needs at most, reserved in the page pool before it takes a
  // slot (`positions`: its prompt rows and frame limit; `branches` sequences). One position more
  // than that: a frame launched ahead may run once past the stream's last frame.
  using PagePool = nn::gpu::KvPagePool;  // engine/frame_pools.h's DevicePools::pages
  static int64_t kv_pages_for_stream(int64_t positions, int branches) {
    return branches * nn::kv_pages_for(positions + 1);
  }
  bool paged() const { return kv_ != nullptr; }
  // A free slot of a paged pool takes a reservation of `pages` (kv_pages_for_stream) that its
  // stream's sequences take pages from (admit_slots and the frames) and release_slot returns.
  Status hold_pages(int slot, int64_t pages);
  // The slot's stream has left (ended, cancelled or dropped): its pages return to the page pool
  // once no frame in flight can write them (at once when it was the pool's last stream: that
  // frame is waited for), its reservation at once. Nothing for unpaged pools; an error here comes
  // back from the next run_frame or admit_slots.
  void release_slot(int slot);
  int64_t slot_kv_pages(int slot) const { return kv_ ? kv_->slot_pages(slot) : 0; }

 protected:
  FrameCore() = default;
  // Allocates the shared buffers (backbone caches of `capacity` positions per sequence) and uploads
  // the slots' counters and sampler settings. The family allocates its own buffers after.
  Status init(const FrameRecipe& r, std::span<const SlotSetup> slots, int64_t capacity);
  // A pool: the shared buffers for `slots` slots of one sequence and `capacity` positions each
  // (a stream of several sequences takes several slots: engine/frame_pools.h), every slot free;
  // streams come in through admit_slots. No slot is active yet. With `pages`, the backbone caches
  // are paged (capacity a multiple of nn::kKvPagePositions).
  Status init_pool(const FrameRecipe& r, int slots, int64_t capacity,
                   std::shared_ptr<nn::gpu::KvPagePool> pages = nullptr);
  // Streams into free slots of a pool, with no frame in flight: each slot's counters and sampler
  // settings reset to its stream's, its penalty history and error flag cleared, its sequences'
  // prompts (`seqs`: branches() per slot, in the order of `slots`) through the backbone, and
  // codebook 0 of its frame 0 sampled. Every slot must be below active_slots(). The other slots
  // are untouched. Returns when next_c0() of the new slots is valid.
  Status admit_slots(std::span<const int> slots, std::span<const SlotSetup> setups, std::span<const SeqRows> seqs);
  // Every sequence's prompt through the backbone (in chunks of rows) and codebook 0 of frame 0.
  Status prefill_sequences(std::span<const SeqRows> seqs);
  Status alloc(cuda::DeviceBuffer& b, size_t bytes);
  // A recipe whose frames launch more work once some slot's settings need it (Breeze: the guidance
  // combination after a guided stream joins a pool) keeps a graph set per variant and active count.
  void set_graph_variant(int v);

  // A recipe's own per-slot state that a moved stream takes along (move_slots): regions of its
  // per-slot buffers, and the rest by move_own_slots (in stream order on `s`, host copies too).
  virtual void add_slot_regions(SlotRegions& r) const { (void)r; }
  virtual Status move_own_slots(std::span<const std::pair<int, int>> moves, cudaStream_t s) {
    (void)moves;
    (void)s;
    return ok_status();
  }

  // The recipe's parts of a frame. enqueue_depth must end by advancing the counters (and saving the
  // frame's codes into frame_codes_dev()); backbone_inputs writes the frame's row of every sequence
  // into bb_h_; combine_backbone returns the logits the sampler reads, [S, vocab] with ld vocab.
  virtual Status enqueue_depth(cudaStream_t s) = 0;
  virtual Status backbone_inputs(cudaStream_t s) = 0;
  virtual Result<float*> combine_backbone(float* logits, cudaStream_t) { return logits; }

  // The report (device and pinned host alike): [frame codes, S×G | codes, S×G | errors, S]. The
  // samplers write the codes and errors; the frame codes are the codes as the depth walk left them
  // (the backbone's sampler then overwrites codebook 0 with the next frame's).
  int32_t* frame_codes_dev() const { return report_.as<int32_t>(); }
  int32_t* codes_dev() const { return report_.as<int32_t>() + S_ * G_; }
  int32_t* errors_dev() const { return report_.as<int32_t>() + 2 * S_ * G_; }

  KvCacheRef depth_kv() const;
  // The rows of the first depth step (two per sequence, [input, first code], at positions 0, 1), or
  // of a later step: one row per sequence at position index + depth_pos_first.
  cuda::RowMap first_step_map() const;
  cuda::RowMap step_map(int index) const;
  // A depth sampler over `logits` ([S, ld]) with the shared fields set; codebook, out and the
  // embedding of the chosen id are the caller's.
  cuda::SampleArgs depth_sampler(float* logits, int64_t ld) const;
  // A depth head over each sequence's last row: x = out + (first ? width : 0), ld (first ? 2 : 1)·width,
  // into logits [Q, vocab]; prefetches the next step's stack, or after the last the backbone's.
  cuda::LinearArgs depth_head(const float* out, bool first, const cuda::DeviceMatrix& head, float* logits,
                              bool last) const;
  // frames[s] advanced and the frame's codes saved (one sequence per slot).
  Status advance_single(cudaStream_t s);

  // Sequences a frame computes: the active slots' branches.
  int rows() const { return n_ * NB_; }

  FrameRecipe r_;
  int S_ = 0, NB_ = 0, Q_ = 0, G_ = 0, n_ = 0, variant_ = 0;
  int64_t H_ = 0, BV_ = 0, cap_ = 0, bb_rows_ = 0;
  cuda::Stream stream_;
  cuda::LinearWorkspace ws_;
  StackScratch bb_scratch_, depth_scratch_;
  cuda::DeviceBuffer bb_kv_, depth_kv_;
  cuda::DeviceBuffer bb_h_, bb_out_, z_, logits_b_;
  cuda::DeviceBuffer scratch_w_, scratch_ids_;
  cuda::DeviceBuffer report_, frames_, prompt_rows_, bb_pos_, min_frames_, history_;
  cuda::DeviceBuffer params_b_, params_d_, iota_, first_seq_, first_pos_, depth_pos_, prefill_seq_, prefill_pos_,
      last_row_;

 private:
  const int32_t* shown() const { return static_cast<const int32_t*>(pipe_.report()); }
  // Buffers for S slots of NB sequences, `prefill_rows` prompt rows per prefill chunk.
  Status allocate(const FrameRecipe& r, int S, int NB, int64_t capacity, int64_t prefill_rows);
  // The backbone's caches, contiguous (bb_kv_) or paged.
  KvCacheRef backbone_kv() const;
  // Prompts through the backbone in chunks of at most bb_rows_ rows into the caches of sequences
  // seq_index[k]; each prompt's last output row goes to z_ row seq_index[k].
  Status prefill_prompts(std::span<const int> seq_index, std::span<const SeqRows> seqs, cudaStream_t s);
  Status enqueue_backbone(cudaStream_t s);
  // The backbone head over the first `rows` sequences' z rows and their combined logits.
  Result<float*> backbone_logits(int rows, cudaStream_t s);
  // Codebook 0 of every active slot, from its logits.
  cuda::SampleArgs backbone_sampler(float* logits) const;
  Status sample_backbone(cudaStream_t s);

  // The regions of a slot's state that a frame changes (what parking saves), or with `whole` all of
  // it (what a moved stream takes along).
  Result<SlotRegions> slot_regions(bool whole) const;
  // Saves (or with `restore` puts back) the parked slots' state around a frame, on `s`.
  Status copy_parked(bool restore, cudaStream_t s);
  // A paged pool's pages for the next `launches` frames, flushed to the device table (a no-op
  // without paging); an error that releasing a slot left behind comes back here.
  Status pages_for_launches(int launches, cudaStream_t s);

  std::vector<int32_t> parked_;
  cuda::DeviceBuffer park_stash_;  // the parked slots' saved state, allocated at the first parking
  cuda::Event ev_[2];  // the prefill's start and end
  cuda::FramePipeline pipe_;
  std::unique_ptr<KvPaging> kv_;  // paged pools only (gives its pages back after ~FrameCore's sync)
  Status kv_error_;               // of release_slot, reported by the next call that can
  FrameTiming times_;
  size_t bytes_ = 0;
};

// dst ← v (host to device); an error when it does not fit.
template <class T>
Status upload(const cuda::DeviceBuffer& dst, const std::vector<T>& v) {
  if (v.empty()) return ok_status();
  if (dst.bytes() < v.size() * sizeof(T)) return make_error(ErrorCode::kInternal, "frame batch: upload overflows");
  return cuda::check(cudaMemcpy(dst.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
}

}  // namespace chorus::frame_core::gpu

#endif  // CHORUS_HAVE_CUDA
