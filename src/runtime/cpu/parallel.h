// Internal: runs fn over [0, n) on the pool when there is one (and it has more than one thread),
// otherwise inline. Kernels split work over output elements only, so results never depend on it.
#pragma once

#include <cstdint>
#include <functional>

#include "core/thread_pool.h"

namespace chorus::cpu::detail {

inline void run_parallel(ThreadPool* pool, int64_t n, int64_t grain,
                         const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool && pool->size() > 1) {
    pool->parallel_for(n, fn, grain);
  } else {
    fn(0, n);
  }
}

// Work (multiply-adds) below which waking other threads costs more than it saves.
inline constexpr int64_t kMinParallelWork = 1 << 16;

inline bool is_weight_dtype(DType dt) {
  return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16;
}

}  // namespace chorus::cpu::detail
