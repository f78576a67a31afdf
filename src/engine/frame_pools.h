// Continuous batching of the GPU engines' streams (Qwen3-TTS, Breeze TTS 2): streams whose frames
// run in device frame pools that they join and leave between frames, and the per-step bookkeeping
// around them. `Frames` is a family's FrameBatch, a recipe of the frame core
// (models/frame_core/frame_core_cuda.h). Nothing here touches CUDA, so the scheduling is tested on
// the CPU with a stand-in for Frames (tests/generation/frame_pools_test.cpp).
//
// A stream whose input arrives while it runs (Qwen3-TTS text in pieces) may wait for it: it keeps
// its slot, and the frames run meanwhile leave that slot exactly as it was (FrameCore's parked
// slots), so its codes are those it makes with all its input from the start.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/tts_model.h"

namespace chorus::engine {

template <class Frames>
class DeviceStream;

template <class Frames>
struct DeviceBatch {
  std::unique_ptr<Frames> frames;
  int unfinished = 0;
  // The unfinished stream in each slot (null: free); empty for a fixed batch.
  std::vector<DeviceStream<Frames>*> held;

  // The lowest of `width` consecutive free slots (a stream of several branches takes one slot per
  // branch, side by side), or -1.
  int free_slots(int width = 1) const {
    const int n = static_cast<int>(held.size());
    for (int i = 0; i + width <= n; ++i) {
      int j = 0;
      while (j < width && !held[static_cast<size_t>(i + j)]) ++j;
      if (j == width) return i;
      i += j;  // slot i + j is held: no run starts at or before it
    }
    return -1;
  }
  // `used` leading slots rounded up to a bucket (powers of two to 16, then multiples of 16), so that
  // few frame graphs serve every count.
  int bucket(int used) const {
    int n = 1;
    while (n < used && n < 16) n *= 2;
    if (used > 16) n = (used + 15) / 16 * 16;
    return std::min(n, static_cast<int>(held.size()));
  }
  // The slots a frame must compute: up to the last held one, rounded up to a bucket.
  int active_slots() const { return bucket(top_slot() + 1); }
  int top_slot() const {  // the last held slot, or -1
    for (size_t i = held.size(); i-- > 0;)
      if (held[i]) return static_cast<int>(i);
    return -1;
  }

  // Streams that end leave holes below the last held slot, which every frame still computes. A
  // stream moved down into a hole (Frames::move_slots) keeps its codes, so when the held slots would
  // fit a smaller bucket, streams move down: the stream in the highest slots to the lowest free run
  // of its width below it, again while there is one. Streams of several slots (Breeze's guidance
  // branches) can leave holes too narrow for that (one slot free below two streams of two): then,
  // when that takes few rounds of moves, every stream slides down to pack the slots from 0 in
  // order. `fixed(stream)`: a stream that must stay (a newcomer not admitted yet). The moves as
  // (stream, its first slot after), in the order they apply, planned without moving anything.
  template <class Fixed>
  std::vector<std::pair<DeviceStream<Frames>*, int>> plan_compaction(Fixed&& fixed) const {
    std::vector<std::pair<DeviceStream<Frames>*, int>> plan;
    int used = 0;
    for (const auto* h : held) used += h != nullptr;
    const int target = bucket(used);
    if (active_slots() <= target) return plan;  // nothing to gain: the common step, without a copy
    DeviceBatch sim;
    sim.held = held;
    for (int top = sim.top_slot(); top >= 0 && sim.bucket(top + 1) > target; top = sim.top_slot()) {
      DeviceStream<Frames>* h = sim.held[static_cast<size_t>(top)];
      const int first = top - h->width + 1, to = sim.free_slots(h->width);
      if (fixed(*h) || to < 0 || to >= first) break;
      for (int j = 0; j < h->width; ++j) {
        sim.held[static_cast<size_t>(to + j)] = h;
        sim.held[static_cast<size_t>(first + j)] = nullptr;
      }
      plan.emplace_back(h, to);
    }
    if (sim.bucket(sim.top_slot() + 1) <= target) return plan;
    std::vector<std::pair<DeviceStream<Frames>*, int>> slide;
    int next = 0;
    for (size_t i = 0; i < held.size(); ++i) {
      DeviceStream<Frames>* h = held[i];
      if (!h || static_cast<int>(i) != h->slot) continue;  // a free slot, or a stream's later slot
      if (h->slot != next) {
        if (fixed(*h)) return plan;
        slide.emplace_back(h, next);
      }
      next += h->width;
    }
    return move_rounds(slide).size() <= kSlideRounds ? slide : plan;
  }
  static constexpr size_t kSlideRounds = 8;
  // Moves (stream, first slot after) as slot pairs (from, to), in rounds for Frames::move_slots: a
  // round ends before a pair whose destination is a source of that round (a stream sliding by less
  // than its width), so no slot of a round is both.
  static std::vector<std::vector<std::pair<int, int>>> move_rounds(
      const std::vector<std::pair<DeviceStream<Frames>*, int>>& moves) {
    std::vector<std::vector<std::pair<int, int>>> rounds;
    std::vector<int> sources;
    for (const auto& [h, to] : moves)
      for (int j = 0; j < h->width; ++j) {
        if (rounds.empty() || std::find(sources.begin(), sources.end(), to + j) != sources.end()) {
          rounds.emplace_back();
          sources.clear();
        }
        rounds.back().emplace_back(h->slot + j, to + j);
        sources.push_back(h->slot + j);
      }
    return rounds;
  }
  template <class Fixed>
  bool compactable(Fixed&& fixed) const {
    return !plan_compaction(fixed).empty();
  }
  // The planned moves, applied to `held` and the streams' slots: the rounds of slot pairs for
  // Frames::move_slots, one call each, in order.
  template <class Fixed>
  std::vector<std::vector<std::pair<int, int>>> compact(Fixed&& fixed) {
    const auto plan = plan_compaction(fixed);
    auto rounds = move_rounds(plan);
    for (const auto& round : rounds)
      for (const auto& [from, to] : round) {
        held[static_cast<size_t>(to)] = held[static_cast<size_t>(from)];
        held[static_cast<size_t>(from)] = nullptr;
      }
    for (const auto& [h, to] : plan) h->slot = to;
    return rounds;
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
  // Input that arrives while the stream runs: whether its frame number `frame` (0-based) can be
  // made with what has arrived. A stream given all its input at the start always can.
  virtual bool has_input_for(int64_t frame) const {
    (void)frame;
    return true;
  }

  void finish(StopReason r) {
    if (reason != StopReason::kRunning) return;
    reason = r;
    if (!batch) return;
    --batch->unfinished;
    if (slot < 0) return;
    for (int j = 0; j < width && static_cast<size_t>(slot + j) < batch->held.size(); ++j) {
      batch->held[static_cast<size_t>(slot + j)] = nullptr;
      batch->frames->release_slot(slot + j);  // its KV pages and their reservation (paged pools)
    }
  }
  // This stream's share of its batch's device memory (and the KV pages it holds), or `before` when
  // it has no batch yet.
  size_t batch_share_bytes(size_t before, size_t page_bytes = 0) const {
    if (!batch) return before;
    int64_t pages = 0;
    for (int j = 0; slot >= 0 && j < width; ++j) pages += batch->frames->slot_kv_pages(slot + j);
    return batch->frames->device_bytes() / static_cast<size_t>(batch->frames->size()) * static_cast<size_t>(width) +
           static_cast<size_t>(pages) * page_bytes;
  }

  const void* owner = nullptr;
  int64_t made = 0;
  StopReason reason = StopReason::kRunning;
  std::shared_ptr<DeviceBatch<Frames>> batch;
  int slot = -1;   // the first of its slots
  int width = 1;   // slots it takes, side by side: one per sequence (guidance branch) of the stream
};

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
    CHORUS_TRY(fb.slot_status(s.slot));
    const int32_t* c = fb.frame_codes(s.slot);
    out[i].has_frame = true;
    out[i].codes.assign(c, c + codebooks);
    s.made += 1;
    if (s.made >= max_frames(s)) s.finish(StopReason::kMaxFrames);
    else if (fb.next_c0(s.slot) == eos) s.finish(StopReason::kEos);
  }
  return ok_status();
}

// The pools of a GPU engine (continuous batching): a new stream takes the lowest run of `width`
// free slots (DeviceStream::width) of the first pool with room (`positions` covering its prompt and
// frames), else a new pool is made by `create(slots, positions)`: room for all the step's newcomers
// and twice the largest pool (first_slots to start, at most max_slots; `create` may make fewer when
// memory is short). Pools live while the engine does; an empty pool smaller than another is released.
// With a page pool (`pages`, a Frames::PagePool: reserve(n) -> Result<bool>, unreserve(n); the
// engine's pools are then paged), a newcomer first reserves the KV pages it may ever need
// (Frames::kv_pages_for_stream of its `width` sequences, nn/kv_pages.h), which its slots then hold
// a sequence's share each; when they cannot be had it waits, and so do the newcomers after it
// (first come, first served), making no frame until streams that end free enough pages. Parked
// slots take no pages for the frames they sit out.
template <class Frames>
struct DevicePools {
  std::vector<std::shared_ptr<DeviceBatch<Frames>>> pools;
  int first_slots = 8, max_slots = 1024;
  int64_t min_positions = 1024;
  std::shared_ptr<typename Frames::PagePool> pages;

  // The first pool's size as asked (LoadOptions::first_pool_slots), within 1..max_slots.
  void set_first_slots(int slots) { first_slots = std::clamp(slots, 1, max_slots); }
};

// One step of `ss` with continuous batching. Streams without a batch join a pool; a pool whose
// frame was launched ahead first finishes that frame for its running streams, then admits the
// newcomers (`admit(frames, slots, stream indices)`: prompts through the backbone and codebook 0 of
// frame 0) and launches the next frame of all of them ahead, read by the next step; otherwise
// newcomers are admitted and every stream of the pool gets a frame now.
//
// Every unfinished stream of a pool must be in `ss`, except those waiting for input (no
// has_input_for(made)): they sit the step out, left out or passed alike, with no frame. One that
// waits before its first frame takes no slot yet; one in a slot is parked (Frames::set_parked_slots):
// the pool's frames leave its state as it was. A frame is launched ahead (before the host has read
// the one before) only when no slot is parked and every stream of it has the input for its next
// frame too, so no frame ever runs for a stream that turns out to wait.
//
// In paged pools (`dp.pages`; Frames::move_slots), streams move down into the holes that others
// left whenever the frames could then compute a smaller bucket (DeviceBatch::compact).
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
  const auto joining = [&](const S& s) { return !s.batch && !s.finished() && s.has_input_for(0); };
  bool waiting = false;  // a newcomer waits for KV pages, and the later ones with it
  for (size_t i = 0; i < ss.size(); ++i) {
    S& s = *ss[i];
    if (s.finished()) continue;
    if (s.batch) {
      if (s.batch->held.empty()) return make_error(ErrorCode::kInternal, "cuda step: a stream of a fixed batch");
      touch(s.batch);
      continue;
    }
    if (!joining(s)) continue;  // waits for the input of its first frame
    if (waiting) continue;
    const int64_t positions = need(s);
    const int width = s.width;
    if (width < 1) return make_error(ErrorCode::kInternal, "cuda step: a stream of no slots");
    const int64_t slot_pages = dp.pages ? Frames::kv_pages_for_stream(positions, 1) : 0;  // a sequence's
    const int64_t pages = slot_pages * width;
    if (dp.pages) {
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
    int pending = 0;  // slots of the newcomers of this step still without them, this one's included
    for (size_t j = i; j < ss.size(); ++j) pending += joining(*ss[j]) ? ss[j]->width : 0;
    // A running pool with room; an idle one only when it holds all the newcomers (else they would be
    // split over two pools, each stepped apart).
    std::shared_ptr<Batch> pool;
    for (const auto& p : dp.pools) {
      if (p->frames->positions() < positions || p->free_slots(width) < 0) continue;
      if (p->unfinished == 0 && p->frames->size() < pending) continue;
      pool = p;
      break;
    }
    if (!pool) {
      // Room for every newcomer of this step at once, and growth by doubling.
      int slots = std::max(dp.first_slots, pending);
      for (const auto& p : dp.pools) slots = std::max(slots, 2 * p->frames->size());
      slots = std::max(std::min(slots, dp.max_slots), width);
      const int64_t pos = (std::max(positions, dp.min_positions) + 255) / 256 * 256;
      pool = std::make_shared<Batch>();
      auto made = create(slots, pos);
      if (!made.ok()) return give_back(std::move(made).error());
      pool->frames = std::move(made).value();
      pool->held.assign(static_cast<size_t>(pool->frames->size()), nullptr);
      if (pool->free_slots(width) < 0)  // device memory left for fewer slots than the stream's branches
        return give_back(make_error(ErrorCode::kResourceExhausted, "cuda step: too little device memory for a new pool"));
      dp.pools.insert(dp.pools.begin(), pool);  // the newest (largest) is filled first
    }
    const int slot = pool->free_slots(width);
    for (int j = 0; dp.pages && j < width; ++j) {
      Status held = pool->frames->hold_pages(slot + j, slot_pages);
      if (held.ok()) continue;
      for (int k = 0; k < j; ++k) pool->frames->release_slot(slot + k);  // returns their holds
      (void)dp.pages->unreserve(slot_pages * (width - j));
      return held;
    }
    s.slot = slot;
    for (int j = 0; j < width; ++j) pool->held[static_cast<size_t>(slot + j)] = &s;
    ++pool->unfinished;
    s.batch = pool;
    joiners[touch(pool)].push_back(i);
  }

  for (size_t k = 0; k < touched.size(); ++k) {
    Batch& pool = *touched[k];
    Frames& fb = *pool.frames;
    // Streams move down into the holes of those that left, with no frame in flight (paged pools:
    // a stream's cache then moves by its page table). When holes could be filled but a frame is in
    // flight, this step launches none ahead, so the next one can.
    const auto newcomer = [&](const DeviceStream<Frames>& h) {
      for (size_t i : joiners[k])
        if (ss[i] == &h) return true;
      return false;
    };
    if (dp.pages && !fb.frame_ahead()) {
      for (const auto& round : pool.compact(newcomer)) {
        CHORUS_TRY(fb.move_slots(round));
        if (times) times->slots_moved += static_cast<int64_t>(round.size());
      }
    }
    const bool hold_back = dp.pages && pool.compactable(newcomer);
    // The pool's streams that get a frame this step, and the slots of those that wait.
    std::vector<size_t> running;
    std::vector<int> parked;
    std::vector<uint8_t> stepped(pool.held.size(), 0);
    for (size_t i = 0; i < ss.size(); ++i) {
      const S& s = *ss[i];
      if (s.batch.get() != &pool || s.finished()) continue;
      for (int j = 0; j < s.width; ++j) stepped[static_cast<size_t>(s.slot + j)] = 1;
      if (std::find(joiners[k].begin(), joiners[k].end(), i) != joiners[k].end()) continue;
      if (s.has_input_for(s.made)) running.push_back(i);
      else
        for (int j = 0; j < s.width; ++j) parked.push_back(s.slot + j);
    }
    for (size_t slot = 0; slot < pool.held.size(); ++slot) {
      const DeviceStream<Frames>* h = pool.held[slot];
      if (!h || stepped[slot]) continue;
      if (h->has_input_for(h->made))
        return make_error(ErrorCode::kUnsupported, "cuda step: every unfinished stream of a pool must be stepped "
                                                   "together (except those waiting for input)");
      parked.push_back(static_cast<int>(slot));
    }
    CHORUS_TRY(fb.set_parked_slots(parked));
    // A frame: feed when some stream may want the frame after it; launched ahead only when no
    // newcomer waits (admission needs the pool idle), no slot is parked and every stream has the
    // input of the frame after it.
    const auto frame = [&](const std::vector<size_t>& act, bool ahead_ok) -> Status {
      bool feed = false, feed_after = false, ahead = ahead_ok && parked.empty() && !hold_back;
      for (size_t i : act) {
        feed = feed || ss[i]->made + 1 < max_frames(*ss[i]);
        feed_after = feed_after || ss[i]->made + 2 < max_frames(*ss[i]);
        ahead = ahead && ss[i]->has_input_for(ss[i]->made + 1);
      }
      fb.set_active_slots(pool.active_slots());
      CHORUS_TRY(fb.run_frame(feed, feed && ahead ? std::optional<bool>(feed_after) : std::nullopt));
      if (times) {
        times->slots_computed += fb.active_slots();
        times->depth_s += fb.timing().depth_ms * 1e-3;
        times->backbone_s += fb.timing().backbone_ms * 1e-3;
      }
      return deliver_frame(fb, ss, act, out, eos, codebooks, max_frames);
    };
    const int64_t graphs_before = fb.graphs_captured();
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
      if (times) {
        times->prefill_s += fb.timing().prefill_ms * 1e-3;
        times->joined += static_cast<int64_t>(joiners[k].size());
        for (size_t i : joiners[k]) times->prefill_rows += ss[i]->prompt_rows() * ss[i]->width;
      }
      for (size_t i : joiners[k]) {
        S& s = *ss[i];
        CHORUS_TRY(fb.slot_status(s.slot));
        if (fb.next_c0(s.slot) == eos) s.finish(StopReason::kEos);
      }
    }
    std::vector<size_t> act;  // the streams of the pool's next frame
    for (const auto& from : {&running, &joiners[k]})
      for (size_t i : *from)
        if (!ss[i]->finished()) act.push_back(i);
    if (!ran) {
      if (!act.empty()) CHORUS_TRY(frame(act, true));
    } else if (!joiners[k].empty() && !act.empty() && parked.empty() && !hold_back) {
      // The frame read above was launched ahead; the next one (the newcomers' first) is launched
      // ahead too when every stream has its input, so it runs while the host delivers and decodes
      // this step's frames instead of after them.
      bool feed = false, ready = true;
      for (size_t i : act) {
        ready = ready && ss[i]->has_input_for(ss[i]->made);
        feed = feed || ss[i]->made + 1 < max_frames(*ss[i]);
      }
      if (ready) {
        fb.set_active_slots(pool.active_slots());
        CHORUS_TRY(fb.launch_frame_ahead(feed));
        if (times)
          for (size_t i : joiners[k]) times->joined_ahead += ss[i]->finished() ? 0 : 1;
      }
    }
    CHORUS_TRY(fb.set_parked_slots({}));
    if (times) times->graphs_captured += fb.graphs_captured() - graphs_before;
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

}  // namespace chorus::engine
