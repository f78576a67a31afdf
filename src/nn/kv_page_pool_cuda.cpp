#ifdef CHORUS_HAVE_CUDA

#include "nn/kv_page_pool_cuda.h"

#include <algorithm>
#include <limits>

namespace chorus::nn::gpu {

namespace {
// An arena is at least this large (fewer allocations as a model warms up), unless memory is short.
constexpr size_t kArenaBytes = size_t{256} << 20;
}  // namespace

Result<std::shared_ptr<KvPagePool>> KvPagePool::create(int64_t layers, int64_t width, size_t max_bytes) {
  if (layers < 1 || width < 1) return make_error(ErrorCode::kInternal, "kv page pool: no layers");
  std::shared_ptr<KvPagePool> p(new KvPagePool());
  p->page_floats_ = 2 * layers * kKvPagePositions * width;
  p->max_bytes_ = max_bytes;
  return p;
}

int64_t KvPagePool::room_locked() const {
  const int64_t page = static_cast<int64_t>(page_bytes());
  int64_t room = std::numeric_limits<int32_t>::max() - alloc_.total();
  if (max_bytes_ > 0) room = std::min(room, static_cast<int64_t>(max_bytes_) / page - alloc_.total());
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const double spare = static_cast<double>(free_bytes) - kKeepFraction * static_cast<double>(total);
  room = std::min(room, spare > 0 ? static_cast<int64_t>(spare / static_cast<double>(page)) : int64_t{0});
  return std::max<int64_t>(room, 0);
}

Result<bool> KvPagePool::reserve(int64_t n) {
  if (n < 0) return make_error(ErrorCode::kInternal, "kv page pool: negative reservation");
  std::lock_guard<std::mutex> lock(mu_);
  if (alloc_.reserve(n)) return true;
  const int64_t missing = n - alloc_.available();
  const int64_t room = room_locked();
  if (room < missing) return false;
  const int64_t pages =
      std::min(room, std::max<int64_t>(missing, static_cast<int64_t>(kArenaBytes / std::max<size_t>(page_bytes(), 1))));
  auto got = cuda::DeviceBuffer::alloc(static_cast<size_t>(pages) * page_bytes());
  if (!got.ok()) return false;  // memory taken meanwhile: the stream waits, as when there is no room
  cuda::DeviceBuffer arena = std::move(got).value();
  CHORUS_TRY(alloc_.grow(pages));
  for (int64_t i = 0; i < pages; ++i) address_.push_back(arena.as<float>() + i * page_floats_);
  arenas_.push_back(std::move(arena));
  return alloc_.reserve(n);
}

Status KvPagePool::unreserve(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  return alloc_.unreserve(n);
}

float* KvPagePool::address(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id >= 0 && static_cast<size_t>(id) < address_.size() ? address_[static_cast<size_t>(id)] : nullptr;
}

KvPageStats KvPagePool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KvPageStats s;
  s.total = alloc_.total();
  s.free = alloc_.free();
  s.promised = alloc_.promised();
  s.page_bytes = static_cast<int64_t>(page_bytes());
  s.ceiling = s.total + room_locked();
  return s;
}

}  // namespace chorus::nn::gpu

#endif  // CHORUS_HAVE_CUDA
