// What the device harnesses (scripts/device/*_harness.cu) share: a failed CUDA call or Status ends
// the run with its message, and device buffers come without a Result to unwrap.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "runtime/cuda/cuda_handles.h"

namespace chorus::harness {

inline void must(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

inline void must(const Status& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, st.error().to_string().c_str());
  std::exit(1);
}

inline cuda::DeviceBuffer alloc(size_t bytes) {
  auto r = cuda::DeviceBuffer::alloc(bytes);
  if (!r.ok()) {
    std::fprintf(stderr, "alloc: %s\n", r.error().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

}  // namespace chorus::harness
