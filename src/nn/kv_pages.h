// Pages of a paged KV cache, counted on the host (no device code here, so it builds and is tested
// everywhere). The GPU frame pools keep their backbone keys and values in fixed-size pages that a
// stream takes as it grows and gives back when it ends (nn/kv_page_pool_cuda.h holds the device
// memory; models/frame_core the per-sequence page tables); this class decides which ids are free.
//
// The admission rule (why running streams never fail): a stream is admitted only with a
// reservation of every page it can ever need (kv_pages_for of its prompt and frame limit), counted
// here and not yet taken; it then takes pages one by one from that reservation as its position
// crosses into a new page, and its untaken rest is returned when it ends or is cancelled. So at
// all times free() >= promised(): a running stream's take() cannot find the pool empty. A cheaper
// rule (a prompt plus some headroom per stream, growth from a shared reserve) cannot promise that:
// streams that all run to their limits would need their worst cases at once, and a stream that
// cannot grow would have to pause or be evicted, which the frame pools cannot do. What paging buys
// under this rule: memory is held in proportion to the positions actually written (a stream that
// stops early returns the rest), a reservation is the stream's own limit rather than its pool's
// capacity, and empty slots hold nothing.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"

namespace chorus::nn {

// Positions per page: a power of two, and a multiple of the 16 keys the attention kernels score at
// a time (one page-table read serves all of them). 64 positions are 5.1 s of 12.5 Hz frames;
// a stream wastes at most one partly filled page per sequence.
inline constexpr int kKvPageShift = 6;
inline constexpr int64_t kKvPagePositions = int64_t{1} << kKvPageShift;
static_assert(kKvPagePositions % 16 == 0, "a page must hold whole groups of 16 scored keys");

// Pages that hold `positions` positions of one sequence.
inline int64_t kv_pages_for(int64_t positions) {
  return positions <= 0 ? 0 : (positions + kKvPagePositions - 1) >> kKvPageShift;
}

struct KvPageStats {
  int64_t total = 0;     // pages that exist (device memory held)
  int64_t free = 0;      // not held by any sequence
  int64_t promised = 0;  // of the free ones, reserved by admitted streams for their growth
  int64_t page_bytes = 0;
  int64_t ceiling = 0;   // most pages there could be (total plus what device memory still allows)
  int64_t available() const { return free - promised; }  // what a new admission may reserve
};

class KvPageAllocator {
 public:
  int64_t total() const { return static_cast<int64_t>(held_.size()); }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }
  int64_t promised() const { return promised_; }
  int64_t available() const { return free() - promised_; }

  // Adds `n` pages, ids total() .. total() + n − 1, all free.
  Status grow(int64_t n);
  // Reserves `n` pages for streams being admitted: false, and nothing changes, when fewer than n
  // are available.
  bool reserve(int64_t n);
  // Returns `n` reserved pages that will not be taken (a stream that ended early).
  Status unreserve(int64_t n);
  // One page of a reservation: a free id, now held. An error when nothing is reserved (a caller
  // that outgrew its reservation; the admission rule above makes that a bug).
  Result<int32_t> take();
  // A held page back to the free ones. An error, and nothing changes, for an id that is not held
  // (never taken, or given back twice).
  Status give_back(int32_t id);
  bool held(int32_t id) const { return id >= 0 && id < total() && held_[static_cast<size_t>(id)]; }

 private:
  std::vector<int32_t> free_;  // free ids; the last is taken first
  std::vector<uint8_t> held_;  // per id
  int64_t promised_ = 0;
};

// The host side of one frame pool's page tables: which page each sequence holds at each page index
// (sequence q = slot · branches + branch, page index = position >> kKvPageShift), each slot's
// reservation and frame count, and the pages of slots that left while frames that may still write
// them were in flight. The device table mirrors it (FrameCore uploads changes() before each launch).
//
// A slot's life: hold (its reservation, made in the allocator by the caller), admit (its prompt
// rows; pages for the prompt), before_launch (before each batch of frames: pages for the positions
// those frames write), release (its pages retire, tagged with the launches so far, and its untaken
// reservation is returned), and reclaim (retired pages go back once every launch before their tag
// has finished). Entries of slots that hold nothing are -1: the device maps them to a scratch page
// of the pool's own, which free slots (that still compute) may write.
class KvPageTable {
 public:
  KvPageTable() = default;
  // `capacity`: positions per sequence, a multiple of kKvPagePositions.
  static Result<KvPageTable> create(int slots, int branches, int64_t capacity);

  int64_t pages_per_sequence() const { return pps_; }
  int64_t entries() const { return static_cast<int64_t>(page_.size()); }
  int32_t page(int64_t seq, int64_t index) const { return page_[static_cast<size_t>(seq * pps_ + index)]; }
  bool occupied(int slot) const { return admitted_[static_cast<size_t>(slot)] != 0; }
  int64_t held_pages() const;     // by admitted slots
  int64_t retiring_pages() const { return static_cast<int64_t>(retiring_.size()); }
  int64_t reserved(int slot) const { return reserve_[static_cast<size_t>(slot)]; }
  int64_t slot_pages(int slot) const;  // held by the slot's sequences
  bool idle() const;                   // no slot admitted or holding a reservation

  // A free slot takes `pages` pages reserved in the allocator by the caller; it owns them from now
  // on (release returns what it did not take).
  Status hold(int slot, int64_t pages);
  // The slot's stream starts: its sequences' prompt rows (one per branch), frame count 0, and pages
  // for positions 0 .. rows − 1 of each sequence.
  Status admit(KvPageAllocator& a, int slot, std::span<const int64_t> prompt_rows);
  // Before `launches` more frames: every admitted slot's sequences get pages up to the position the
  // last of them writes (frame k of a slot writes position min(rows + k − 1, capacity − 1)), and
  // the slots' frame counts advance by `launches`. A `parked` slot's frame is computed but undone
  // (its state restored; only with launches == 1): it does not advance, and it gets the page of the
  // one position that frame writes, the position its next real frame writes again.
  Status before_launch(KvPageAllocator& a, int launches, std::span<const int32_t> parked = {});
  // The slot's stream left after `launched` launches of its pool: its pages retire until
  // reclaim(done) with done >= launched; its entries turn -1; its untaken reservation is returned.
  Status release(KvPageAllocator& a, int slot, int64_t launched);
  // The stream in slot `from` moves to the free slot `to` (compaction: the frames compute the leading
  // slots only), with no frame in flight: its pages, reservation, prompt rows and frame count go
  // along; `from`'s entries turn -1 and it is free. The pages stay held, so nothing retires.
  Status move(int from, int to);
  // Retired pages whose launches have all finished (`done` launches waited for) go back.
  Status reclaim(KvPageAllocator& a, int64_t done);
  // Everything this table holds back to the allocator (its pool is gone, nothing in flight).
  Status release_all(KvPageAllocator& a);
  // Entries changed since the last call: (entry index seq · pages_per_sequence + index, page id or -1).
  std::vector<std::pair<int64_t, int32_t>> changes();

 private:
  Status cover(KvPageAllocator& a, int slot, int64_t seq, int64_t positions);
  void set(int64_t entry, int32_t id);

  int S_ = 0, NB_ = 0;
  int64_t cap_ = 0, pps_ = 0;
  std::vector<int32_t> page_;        // [S · NB · pps] page ids, -1: none
  std::vector<int64_t> count_;       // [S · NB] pages held from index 0
  std::vector<int64_t> rows_;        // [S · NB] prompt rows
  std::vector<int64_t> frames_;      // [S] frames launched since admission
  std::vector<int64_t> reserve_;     // [S] reserved pages not yet taken
  std::vector<uint8_t> admitted_;    // [S]
  std::vector<std::pair<int64_t, int32_t>> retiring_;  // (tag, page)
  std::vector<int64_t> changed_;     // entries changed since changes()
  std::vector<uint8_t> dirty_;       // [entries]
};

}  // namespace chorus::nn
