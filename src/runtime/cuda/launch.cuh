// Kernel launches with programmatic dependent launch (PDL, sm_90): a kernel may start while the
// previous kernel on the stream is still running, so its launch latency and its reads of constant
// data (weights) overlap the predecessor. Every kernel launched this way must call dev::pdl_wait()
// before it touches memory that an earlier kernel writes or reads (activations, caches, codes);
// weights may be read before it.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace chorus::cuda {

namespace dev {
// Waits until every kernel this one depends on has completed and its writes are visible.
__device__ __forceinline__ void pdl_wait_only() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// Lets the next kernel on the stream start launching (its blocks become resident and run up to
// their own wait).
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" :::); }
// The usual order: wait, then let the next kernel start launching.
__device__ __forceinline__ void pdl_wait() {
  pdl_wait_only();
  pdl_launch_dependents();
}
}  // namespace dev

template <class... KArgs, class... Args>
cudaError_t launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace chorus::cuda
