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

// Entries per launch of set_table_entries (its arguments stay well under the 4 KB limit).
constexpr int kTableEntries = 64;
struct TableEntries {
  int64_t index[kTableEntries];
  float* page[kTableEntries];
  int n;
};

// Launched without PDL: it starts after the kernels before it, which may read the table, are done.
__global__ void set_entries_kernel(float** table, TableEntries e) {
  const int i = threadIdx.x;
  if (i < e.n) table[e.index[i]] = e.page[i];
}

}  // namespace

Status set_table_entries(float** table, const int64_t* index, float* const* page, int n, cudaStream_t s) {
  for (int a = 0; a < n; a += kTableEntries) {
    TableEntries e{};
    e.n = n - a < kTableEntries ? n - a : kTableEntries;
    for (int i = 0; i < e.n; ++i) {
      e.index[i] = index[a + i];
      e.page[i] = page[a + i];
    }
    set_entries_kernel<<<1, kTableEntries, 0, s>>>(table, e);
    CHORUS_CUDA_LAUNCHED("set_entries_kernel");
  }
  return ok_status();
}

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
