#include "models/frame_core/frame_kernels_cuda.h"

#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/launch.cuh"

namespace chorus::frame_core::gpu {

namespace {

__global__ void advance_kernel(int32_t* frames, const int32_t* prompt_rows, int32_t cap, int32_t* pos, int B,
                               const int32_t* codes, int G, int32_t* saved) {
  cuda::dev::pdl_wait();
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const int32_t f = frames[b] + 1;
  frames[b] = f;
  pos[b] = min(prompt_rows[b] + f - 1, cap - 1);
  for (int g = 0; g < G; ++g) saved[b * G + g] = codes[b * G + g];
}

__global__ void gather_kernel(const float* src, const int32_t* index, int64_t width, float* dst) {
  cuda::dev::pdl_wait();
  const int i = blockIdx.x;
  const float* s = src + static_cast<int64_t>(index[i]) * width;
  for (int64_t d = threadIdx.x; d < width; d += blockDim.x) dst[i * width + d] = s[d];
}

}  // namespace

Status advance_frames(int32_t* frames, const int32_t* prompt_rows, int32_t capacity, int32_t* pos, int B,
                      const int32_t* codes, int G, int32_t* saved, cudaStream_t s) {
  if (B <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(advance_kernel, dim3((B + 255) / 256), dim3(256), 0, s, frames, prompt_rows, capacity, pos, B,
                               codes, G, saved));
  return ok_status();
}

Status gather_rows(const float* src, const int32_t* index, int64_t width, int n, float* dst, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(gather_kernel, dim3(n), dim3(256), 0, s, src, index, width, dst));
  return ok_status();
}

}  // namespace chorus::frame_core::gpu
