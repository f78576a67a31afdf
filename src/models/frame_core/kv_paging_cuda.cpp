#ifdef CHORUS_HAVE_CUDA

#include "models/frame_core/kv_paging_cuda.h"

#include <limits>
#include <vector>

#include "models/frame_core/frame_kernels_cuda.h"

namespace chorus::frame_core::gpu {

Result<std::unique_ptr<KvPaging>> KvPaging::create(std::shared_ptr<nn::gpu::KvPagePool> pool, int slots, int branches,
                                                   int64_t capacity) {
  if (!pool) return make_error(ErrorCode::kInternal, "kv paging: no page pool");
  std::unique_ptr<KvPaging> k(new KvPaging());
  CHORUS_ASSIGN(k->table_host_, nn::KvPageTable::create(slots, branches, capacity));
  k->pool_ = std::move(pool);
  CHORUS_ASSIGN(k->trash_, cuda::DeviceBuffer::alloc(k->pool_->page_bytes()));
  const size_t entries = static_cast<size_t>(k->table_host_.entries());
  CHORUS_ASSIGN(k->table_, cuda::DeviceBuffer::alloc(entries * sizeof(float*)));
  const std::vector<float*> trash(entries, k->trash_.as<float>());
  CHORUS_CUDA_TRY(cudaMemcpy(k->table_.data(), trash.data(), entries * sizeof(float*), cudaMemcpyHostToDevice));
  return k;
}

KvPaging::~KvPaging() {
  if (pool_) (void)pool_->with_allocator([&](nn::KvPageAllocator& a) { return table_host_.release_all(a); });
}

int64_t KvPaging::slot_pages(int slot) const {
  return table_host_.slot_pages(slot);
}

Status KvPaging::admit(int slot, std::span<const int64_t> prompt_rows) {
  return pool_->with_allocator([&](nn::KvPageAllocator& a) { return table_host_.admit(a, slot, prompt_rows); });
}

Status KvPaging::before_launch(int launches, std::span<const int32_t> parked) {
  return pool_->with_allocator(
      [&](nn::KvPageAllocator& a) { return table_host_.before_launch(a, launches, parked); });
}

Status KvPaging::release(int slot, int64_t launched) {
  return pool_->with_allocator([&](nn::KvPageAllocator& a) { return table_host_.release(a, slot, launched); });
}

Status KvPaging::reclaim(int64_t done) {
  if (table_host_.retiring_pages() == 0) return ok_status();
  return pool_->with_allocator([&](nn::KvPageAllocator& a) { return table_host_.reclaim(a, done); });
}

Status KvPaging::flush(cudaStream_t s) {
  const auto changed = table_host_.changes();
  if (changed.empty()) return ok_status();
  std::vector<int64_t> index;
  std::vector<float*> page;
  index.reserve(changed.size());
  page.reserve(changed.size());
  for (const auto& [entry, id] : changed) {
    float* p = id < 0 ? trash_.as<float>() : pool_->address(id);
    if (!p) return make_error(ErrorCode::kInternal, "kv paging: a page the pool does not know");
    index.push_back(entry);
    page.push_back(p);
  }
  if (changed.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    return make_error(ErrorCode::kInternal, "kv paging: too many changed entries");
  return set_table_entries(table_.as<float*>(), index.data(), page.data(), static_cast<int>(index.size()), s);
}

}  // namespace chorus::frame_core::gpu

#endif  // CHORUS_HAVE_CUDA
