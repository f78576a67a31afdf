// The device memory of a paged backbone KV cache, shared by every frame pool of one loaded model:
// pages of kKvPagePositions positions × every layer's keys and values (KvCacheRef::page_floats),
// in arenas allocated as streams need them, and the allocator that hands their ids out
// (nn/kv_pages.h, whose comment gives the admission rule). One pool per model rather than per frame
// pool: a model's frame pools (of different capacities and slot counts) then draw on one budget,
// the free-page count describes the model, and a pool's slots cost nothing until a stream uses them.
// The arenas stay until the pool goes (a model's high-water mark), as the frame pools did.
// Thread-safe. Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "nn/kv_pages.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::nn::gpu {

class KvPagePool {
 public:
  // Pages for a stack of `layers` layers whose cached rows are `width` floats. `max_bytes` bounds
  // the pages' memory (0: as much as the device allows, keeping kKeepFraction of it free).
  static Result<std::shared_ptr<KvPagePool>> create(int64_t layers, int64_t width, size_t max_bytes = 0);
  // Of the device's memory, the share page growth leaves free: the frame pools keep a tenth free
  // for codec states and their own growth (engine/device_batch.h slots_that_fit), so this is more.
  static constexpr double kKeepFraction = 0.15;

  int64_t page_floats() const { return page_floats_; }
  size_t page_bytes() const { return static_cast<size_t>(page_floats_) * sizeof(float); }

  // Reserves `n` pages for streams being admitted, first growing the pool by an arena when too few
  // are available and memory allows; false (nothing reserved) when they cannot be had now.
  Result<bool> reserve(int64_t n);
  Status unreserve(int64_t n);
  // Runs f(allocator) under the pool's lock (the frame pools' page tables take and return pages).
  template <class F>
  auto with_allocator(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(alloc_);
  }
  // The device address of page `id` (null for an unknown id).
  float* address(int32_t id) const;
  // Counts now; `ceiling` also asks the device how much memory is free.
  KvPageStats stats() const;

 private:
  KvPagePool() = default;
  // Pages an arena may still add (the memory bound and the device's free memory), under mu_.
  int64_t room_locked() const;

  mutable std::mutex mu_;
  KvPageAllocator alloc_;
  std::vector<cuda::DeviceBuffer> arenas_;
  std::vector<float*> address_;  // [page id]
  int64_t page_floats_ = 0;
  size_t max_bytes_ = 0;
};

}  // namespace chorus::nn::gpu

#endif  // CHORUS_HAVE_CUDA
