// What the GPU engines of every family share (Qwen3-TTS, Breeze TTS 2): streams whose frames run in
// device frame pools that they join and leave between frames (continuous batching), and the
// per-step bookkeeping around them. `Frames` is a family's FrameBatch,
// a recipe of the frame core (models/frame_core/frame_core_cuda.h).
// Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/tts_model.h"
#include "nn/kv_page_pool_cuda.h"
#include "runtime/cuda/ops.h"

namespace chorus::engine {

template <class Frames>
struct DeviceBatch {
  std::unique_ptr<Frames> frames;
  int unfinished = 0;
  // Which slots hold an unfinished stream.
  std::vector<uint8_t> used;

  int free_slot() const {
    for (size_t i = 0; i < used.size(); ++i)
      if (!used[i]) return static_cast<int>(i);
    return -1;
  }
  // The slots a frame must compute: up to the last used one, rounded up to a bucket (powers of two
  // to 16, then multiples of 16) so that few frame graphs serve every count.
  int active_slots() const {
    int top = 0;
    for (size_t i = 0; i < used.size(); ++i)
      if (used[i]) top = static_cast<int>(i) + 1;
    int n = 1;
    while (n < top && n < 16) n *= 2;
    if (top > 16) n = (top + 15) / 16 * 16;
    return std::min(n, static_cast<int>(used.size()));
  }
};

// A stream's place in its batch (none before its first step) and where it stands.
template <class Frames>
class DeviceStream : public TtsStream {
 public:
  // A stream dropped before it ends gives its pool slot back.
  ~DeviceStream() override { finish(StopReason::kCancelled); }
  bool finished() const override { return reason != StopReason::kRunning; }
  StopReason stop_reason() const override { return reason; }
  int64_t frames() const override { return made; }
  void cancel() override { finish(StopReason::kCancelled); }

  void finish(StopReason r) {
    if (reason != StopReason::kRunning) return;
    reason = r;
    if (!batch) return;
    --batch->unfinished;
    if (slot >= 0 && static_cast<size_t>(slot) < batch->used.size()) {
      batch->used[static_cast<size_t>(slot)] = 0;
      batch->frames->release_slot(slot);  // its KV pages and their reservation (paged pools)
    }
  }
  // This stream's share of its batch's device memory (and the KV pages it holds), or `before` when
  // it has no batch yet.
  size_t batch_share_bytes(size_t before, size_t page_bytes = 0) const {
    if (!batch) return before;
    const int64_t pages = slot >= 0 ? batch->frames->slot_kv_pages(slot) : 0;
    return batch->frames->device_bytes() / static_cast<size_t>(batch->frames->size()) +
           static_cast<size_t>(pages) * page_bytes;
  }

  const void* owner = nullptr;
  int64_t made = 0;
  StopReason reason = StopReason::kRunning;
  std::shared_ptr<DeviceBatch<Frames>> batch;
  int slot = -1;
};

// The device sampler's error flag of one slot as a Status.
inline Status sampler_status(int32_t flag) {
  if (flag == cuda::kSampleNonFinite) return make_error(ErrorCode::kInternal, "sampler: the model produced a non-finite logit");
  if (flag == cuda::kSampleAllMasked) return make_error(ErrorCode::kInternal, "sampler: every id is masked");
  return ok_status();
}

// The streams of `streams` that belong to `owner`, or an error naming the one that does not.
template <class S>
Result<std::vector<S*>> own_streams(std::span<TtsStream* const> streams, std::span<StepResult> out, const void* owner) {
  if (out.size() != streams.size()) return make_error(ErrorCode::kInternal, "step: one result per stream");
  std::vector<S*> ss;
  for (TtsStream* t : streams) {
    auto* c = dynamic_cast<S*>(t);
    if (!c || c->owner != owner) return make_error(ErrorCode::kInvalidArgument, "step: a stream of another model");
    ss.push_back(c);
  }
  for (StepResult& o : out) {
    o.has_frame = false;
    o.codes.clear();
  }
  return ss;
}

// Delivers one frame of `fb` to the streams `act` (indices into ss) and applies the stop rules.
template <class Frames, class S, class MaxFrames>
Status deliver_frame(Frames& fb, const std::vector<S*>& ss, const std::vector<size_t>& act, std::span<StepResult> out,
                     int32_t eos, int codebooks, MaxFrames&& max_frames) {
  for (size_t i : act) {
    S& s = *ss[i];
    if (s.finished()) continue;
    CHORUS_TRY(sampler_status(fb.error(s.slot)));
    const int32_t* c = fb.frame_codes(s.slot);
    out[i].has_frame = true;
    out[i].codes.assign(c, c + codebooks);
    s.made += 1;
    if (s.made >= max_frames(s)) s.finish(StopReason::kMaxFrames);
    else if (fb.next_c0(s.slot) == eos) s.finish(StopReason::kEos);
  }
  return ok_status();
}

// At most `slots` slots of `bytes_per_slot` device bytes each, as many as the free device memory
// holds with a tenth of the device kept back (the codec's states, other pools' growth).
inline Result<int> slots_that_fit(int slots, double bytes_per_slot) {
  size_t free_bytes = 0, total = 0;
  CHORUS_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  const double room = static_cast<double>(free_bytes) - 0.1 * static_cast<double>(total);
  const int fit = room > 0 && bytes_per_slot > 0 ? static_cast<int>(std::min(room / bytes_per_slot, 1e9)) : 0;
  if (fit < 1) return make_error(ErrorCode::kResourceExhausted, "no device memory left for another stream");
  return std::min(slots, fit);
}

// The pools of a GPU engine (continuous batching): a new stream takes the lowest free slot of the
// first pool with room (`positions` covering its prompt and frames), else a new pool is made by
// `create(slots, positions)`: room for all the step's newcomers and twice the largest pool (first_slots
// to start, at most max_slots; `create` may make fewer when memory is short).
// Pools live while the engine does; an empty pool smaller than another is released.
// With a page pool (`pages`; the engine's pools are then paged), a newcomer first reserves the KV
// pages it may ever need (FrameCore::kv_pages_for_stream of `branches` sequences, nn/kv_pages.h);
// when they cannot be had it waits, and so do the newcomers after it (first come, first served),
// making no frame until streams that end free enough pages.
template <class Frames>
struct DevicePools {
  std::vector<std::shared_ptr<DeviceBatch<Frames>>> pools;
  int first_slots = 8, max_slots = 1024;
  int64_t min_positions = 1024;
  std::shared_ptr<nn::gpu::KvPagePool> pages;
  int branches = 1;  // sequences per stream
};

// A stream that needs more KV pages than the device could ever hold is refused at once (the others
// wait for pages: DevicePools).
inline Status check_kv_room(const nn::gpu::KvPagePool& pages, int64_t need) {
  const nn::KvPageStats st = pages.stats();
  if (need <= st.ceiling) return ok_status();
  const auto mib = [&](int64_t n) { return std::to_string(n * st.page_bytes >> 20) + " MiB"; };
  return make_error(ErrorCode::kResourceExhausted, "the request needs " + std::to_string(need) + " KV cache pages (" +
                                                       mib(need) + ") and the device holds at most " +
                                                       std::to_string(st.ceiling) + " (" + mib(st.ceiling) + ")");
}

// One step of `ss` with continuous batching. Streams without a batch join a pool; a pool whose
// frame was launched ahead first finishes that frame for its running streams, then admits the
// newcomers (`admit(frames, slots, stream indices)`: prompts through the backbone and codebook 0 of
// frame 0), whose first frame comes with the next step; otherwise newcomers are admitted and every
// stream of the pool gets a frame now. Every unfinished stream of a pool must be in `ss`.
template <class Frames, class S, class Need, class Create, class Admit, class MaxFrames>
Status step_pooled_streams(DevicePools<Frames>& dp, const std::vector<S*>& ss, std::span<StepResult> out, int32_t eos,
                           int codebooks, Need&& need, Create&& create, Admit&& admit, MaxFrames&& max_frames,
                           StageTimes* times) {
  using Batch = DeviceBatch<Frames>;
  std::vector<std::shared_ptr<Batch>> touched;
  std::vector<std::vector<size_t>> joiners;
  const auto touch = [&](const std::shared_ptr<Batch>& b) -> size_t {
    for (size_t k = 0; k < touched.size(); ++k)
      if (touched[k] == b) return k;
    touched.push_back(b);
    joiners.emplace_back();
    return touched.size() - 1;
  };
  bool waiting = false;  // a newcomer waits for KV pages, and the later ones with it
  for (size_t i = 0; i < ss.size(); ++i) {
    S& s = *ss[i];
    if (s.finished()) continue;
    if (s.batch) {
      if (s.batch->used.empty()) return make_error(ErrorCode::kInternal, "cuda step: a stream of a fixed batch");
      touch(s.batch);
      continue;
    }
    if (waiting) continue;
    const int64_t positions = need(s);
    int64_t pages = 0;
    if (dp.pages) {
      pages = Frames::kv_pages_for_stream(positions, dp.branches);
      CHORUS_ASSIGN(const bool reserved, dp.pages->reserve(pages));
      if (!reserved) {
        waiting = true;
        continue;
      }
    }
    // Until the slot holds them, the reservation goes back on any failure.
    auto give_back = [&](Status st) -> Status {
      if (dp.pages) (void)dp.pages->unreserve(pages);
      return st;
    };
    int pending = 0;  // newcomers of this step still without a slot, this one included
    for (size_t j = i; j < ss.size(); ++j) pending += !ss[j]->batch && !ss[j]->finished();
    // A running pool with a free slot; an idle one only when it holds all the newcomers (else they
    // would be split over two pools, each stepped apart).
    std::shared_ptr<Batch> pool;
    for (const auto& p : dp.pools) {
      if (p->frames->positions() < positions || p->free_slot() < 0) continue;
      if (p->unfinished == 0 && p->frames->size() < pending) continue;
      pool = p;
      break;
    }
    if (!pool) {
      // Room for every newcomer of this step at once, and growth by doubling.
      int slots = std::max(dp.first_slots, pending);
      for (const auto& p : dp.pools) slots = std::max(slots, 2 * p->frames->size());
      slots = std::min(slots, dp.max_slots);
      const int64_t pos = (std::max(positions, dp.min_positions) + 255) / 256 * 256;
      pool = std::make_shared<Batch>();
      auto made = create(slots, pos);
      if (!made.ok()) return give_back(std::move(made).error());
      pool->frames = std::move(made).value();
      pool->used.assign(static_cast<size_t>(pool->frames->size()), 0);
      dp.pools.insert(dp.pools.begin(), pool);  // the newest (largest) is filled first
    }
    const int slot = pool->free_slot();
    if (dp.pages) {
      Status held = pool->frames->hold_pages(slot, pages);
      if (!held.ok()) return give_back(std::move(held));
    }
    s.slot = slot;
    pool->used[static_cast<size_t>(s.slot)] = 1;
    ++pool->unfinished;
    s.batch = pool;
    joiners[touch(pool)].push_back(i);
  }

  for (size_t k = 0; k < touched.size(); ++k) {
    Batch& pool = *touched[k];
    Frames& fb = *pool.frames;
    std::vector<size_t> running;
    for (size_t i = 0; i < ss.size(); ++i)
      if (ss[i]->batch.get() == &pool && !ss[i]->finished() &&
          std::find(joiners[k].begin(), joiners[k].end(), i) == joiners[k].end())
        running.push_back(i);
    if (static_cast<int>(running.size() + joiners[k].size()) != pool.unfinished)
      return make_error(ErrorCode::kUnsupported, "cuda step: every unfinished stream of a pool must be stepped together");
    // A frame: feed when some stream may want the frame after it; launched ahead only when no
    // newcomer waits (admission needs the pool idle).
    const auto frame = [&](const std::vector<size_t>& act, bool ahead_ok) -> Status {
      bool feed = false, feed_after = false;
      for (size_t i : act) {
        feed = feed || ss[i]->made + 1 < max_frames(*ss[i]);
        feed_after = feed_after || ss[i]->made + 2 < max_frames(*ss[i]);
      }
      fb.set_active_slots(pool.active_slots());
      CHORUS_TRY(fb.run_frame(feed, feed && ahead_ok ? std::optional<bool>(feed_after) : std::nullopt));
      if (times) {
        times->depth_s += fb.timing().depth_ms * 1e-3;
        times->backbone_s += fb.timing().backbone_ms * 1e-3;
      }
      return deliver_frame(fb, ss, act, out, eos, codebooks, max_frames);
    };
    bool ran = false;
    if (!running.empty() && (joiners[k].empty() || fb.frame_ahead())) {
      CHORUS_TRY(frame(running, joiners[k].empty()));
      ran = true;
    }
    if (!joiners[k].empty()) {
      CHORUS_TRY(fb.settle());  // a frame launched for streams that have all left since
      std::vector<int> slots;
      for (size_t i : joiners[k]) slots.push_back(ss[i]->slot);
      fb.set_active_slots(pool.active_slots());
      CHORUS_TRY(admit(fb, slots, joiners[k]));
      if (times) times->prefill_s += fb.timing().prefill_ms * 1e-3;
      for (size_t i : joiners[k]) {
        S& s = *ss[i];
        CHORUS_TRY(sampler_status(fb.error(s.slot)));
        if (fb.next_c0(s.slot) == eos) s.finish(StopReason::kEos);
      }
    }
    if (!ran) {
      std::vector<size_t> act;
      for (size_t i : running) act.push_back(i);
      for (size_t i : joiners[k])
        if (!ss[i]->finished()) act.push_back(i);
      if (!act.empty()) CHORUS_TRY(frame(act, true));
    }
  }
  // An empty pool is kept only while no other is as large (the next request reuses it).
  int largest = 0;
  for (const auto& p : dp.pools) largest = std::max(largest, p->frames->size());
  bool kept = false;
  std::erase_if(dp.pools, [&](const std::shared_ptr<Batch>& p) {
    if (p->unfinished > 0) return false;
    if (p->frames->size() < largest || kept) return true;
    kept = true;
    return false;
  });
  return ok_status();
}

// The parts of a GPU engine that every family shares: its CPU engine (request handling, voices),
// which outlives the device model (a base's members are destroyed after the derived class's).
template <class CpuEngine>
class DeviceEngine : public TtsModel {
 public:
  const ModelInfo& info() const override { return info_; }
  const VoiceCloner* voice_cloner() const override { return cpu_->voice_cloner(); }

 protected:
  std::unique_ptr<CpuEngine> cpu_;
  ModelInfo info_;
};

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
