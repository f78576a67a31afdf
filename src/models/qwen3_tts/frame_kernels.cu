#include "models/qwen3_tts/frame_kernels_cuda.h"

#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/launch.cuh"

namespace chorus::qwen3_tts::gpu {

namespace {

__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

__global__ void cp_first_kernel(const float* z, const uint16_t* emb, int64_t H, const int32_t* codes, int G,
                                float* xt) {
  cuda::dev::pdl_wait();
  const int b = blockIdx.x;
  const int32_t c0 = codes[static_cast<int64_t>(b) * G];
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    xt[(2 * b) * H + i] = z[b * H + i];
    xt[(2 * b + 1) * H + i] = bf16f(emb[static_cast<int64_t>(c0) * H + i]);
  }
}

__global__ void cp_step_kernel(const uint16_t* table, int64_t H, const int32_t* codes, int G, int k, float* xt) {
  cuda::dev::pdl_wait();
  const int b = blockIdx.x;
  const int32_t c = codes[static_cast<int64_t>(b) * G + k];
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) xt[b * H + i] = bf16f(table[static_cast<int64_t>(c) * H + i]);
}

// One thread per element of a row (grid: element blocks × streams). The codebook rows are loaded a
// group at a time before any is added, so a thread's 16 reads are in flight together; the sum is
// still taken in codebook order, then the text row, as the CPU does.
constexpr int kInputThreads = 128;
constexpr int kInputGroup = 16;

__global__ void talker_inputs_kernel(const uint16_t* const* tables, int64_t H, const int32_t* codes, int G,
                                     TextRows text, const int32_t* frames, float* x) {
  cuda::dev::pdl_wait();
  const int b = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kInputThreads + threadIdx.x;
  if (i >= H) return;
  const int32_t* c = codes + static_cast<int64_t>(b) * G;
  const int k = frames[b] - 1;
  const float* trow = k >= 0 && k < text.count[b] ? text.rows + (static_cast<int64_t>(text.offset[b]) + k) * H
                                                  : text.pad + b * H;
  float acc = 0.0f;
  for (int g0 = 0; g0 < G; g0 += kInputGroup) {
    float v[kInputGroup];
#pragma unroll
    for (int j = 0; j < kInputGroup; ++j)
      v[j] = g0 + j < G ? bf16f(tables[g0 + j][static_cast<int64_t>(c[g0 + j]) * H + i]) : 0.0f;
#pragma unroll
    for (int j = 0; j < kInputGroup; ++j)
      if (g0 + j < G) acc += v[j];
  }
  x[b * H + i] = acc + trow[i];
}

}  // namespace

Status cp_first_inputs(const float* z, const uint16_t* codec_embedding, int64_t hidden, const int32_t* codes, int G,
                       int B, float* xt, cudaStream_t s) {
  if (B <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(cp_first_kernel, dim3(B), dim3(256), 0, s, z, codec_embedding, hidden, codes, G, xt));
  return ok_status();
}

Status cp_step_inputs(const uint16_t* table, int64_t hidden, const int32_t* codes, int G, int k, int B, float* xt,
                      cudaStream_t s) {
  if (B <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(cp_step_kernel, dim3(B), dim3(256), 0, s, table, hidden, codes, G, k, xt));
  return ok_status();
}

Status talker_inputs(const uint16_t* const* tables, int64_t hidden, const int32_t* codes, int G, int B, TextRows text,
                     const int32_t* frames, float* x, cudaStream_t s) {
  if (B <= 0) return ok_status();
  const dim3 grid(static_cast<unsigned>((hidden + kInputThreads - 1) / kInputThreads), static_cast<unsigned>(B));
  CHORUS_CUDA_TRY(cuda::launch(talker_inputs_kernel, grid, dim3(kInputThreads), 0, s, tables, hidden, codes, G, text,
                               frames, x));
  return ok_status();
}

}  // namespace chorus::qwen3_tts::gpu
