// A frame pool's paged backbone caches (nn/kv_pages.h, nn/kv_page_pool_cuda.h): the device page
// table [sequences, capacity / kKvPagePositions] of page addresses that the attention kernels read
// (KvCacheRef::pages), its host side, and the scratch page that the entries of sequences without
// pages point to (free slots still compute; their keys and values land there). The frame core
// calls it around every launch: pages for the positions the next frames write, changed entries
// uploaded in stream order, retired pages reclaimed once the frames that could write them are done.
// Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>

#include "nn/kv_page_pool_cuda.h"
#include "nn/kv_pages.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::frame_core::gpu {

class KvPaging {
 public:
  static Result<std::unique_ptr<KvPaging>> create(std::shared_ptr<nn::gpu::KvPagePool> pool, int slots, int branches,
                                                  int64_t capacity);
  // Gives every held page and reservation back; the caller has waited for its stream.
  ~KvPaging();

  float* const* table() const { return table_.as<float* const>(); }
  size_t bytes() const { return table_.bytes() + trash_.bytes(); }
  int64_t slot_pages(int slot) const;
  bool idle() const { return table_host_.idle(); }

  // nn::KvPageTable's steps, on the pool's allocator.
  Status hold(int slot, int64_t pages) { return table_host_.hold(slot, pages); }
  Status admit(int slot, std::span<const int64_t> prompt_rows);
  Status before_launch(int launches, std::span<const int32_t> parked = {});
  Status release(int slot, int64_t launched);
  Status move(int from, int to) { return table_host_.move(from, to); }
  Status reclaim(int64_t done);
  // The entries changed since the last call, to the device table on `s` (before the launches that
  // read them).
  Status flush(cudaStream_t s);

 private:
  KvPaging() = default;
  std::shared_ptr<nn::gpu::KvPagePool> pool_;
  nn::KvPageTable table_host_;
  cuda::DeviceBuffer table_;  // [entries] float*
  cuda::DeviceBuffer trash_;  // one page
};

}  // namespace chorus::frame_core::gpu

#endif  // CHORUS_HAVE_CUDA
