// Bulk asynchronous copies global → shared (cp.async.bulk, sm_90) completing on an mbarrier, shared
// by the persistent decoder stack (decode_stack.cu) and the bulk-copy MLP (mlp.cu).
#pragma once

#include <cstdint>

#include "runtime/cuda/device_util.cuh"

namespace chorus::cuda::dev {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// `bar` expects `count` arrivals per phase (one thread, before the block's barrier that publishes it).
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// After the initializations: makes them visible to the asynchronous (bulk-copy) proxy.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Spins until the phase of `bar` with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// The phase of `bar` expects `bytes` more of copies (the arrival of the thread that issues them).
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, int64_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(static_cast<unsigned>(bytes))
               : "memory");
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int64_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(static_cast<unsigned>(bytes)), "r"(smem_addr(bar))
               : "memory");
}

// A weight copy: bulk_copy with the weight loads' L2 policy (weight_l2_policy, evict-first).
__device__ __forceinline__ void bulk_copy_weights(void* dst, const void* src, int64_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_addr(dst)), "l"(src), "r"(static_cast<unsigned>(bytes)), "r"(smem_addr(bar)),
        "l"(weight_l2_policy())
      : "memory");
}

}  // namespace chorus::cuda::dev
