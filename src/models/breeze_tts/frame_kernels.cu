#include "models/breeze_tts/frame_kernels_cuda.h"

#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/launch.cuh"

namespace chorus::breeze_tts::gpu {

namespace {

__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// Row of codebook k, code c, or null when c is not a code (an EOS class id).
__device__ __forceinline__ const uint16_t* table_row(const AudioTable& t, int k, int32_t c) {
  if (c < 0 || c >= t.vocab) return nullptr;
  return t.data + (static_cast<int64_t>(k) * t.vocab + c) * t.width;
}

__global__ void depth_first_kernel(const float* hidden, AudioTable t, const int32_t* codes, int G, int NB, float* out) {
  cuda::dev::pdl_wait();
  const int q = blockIdx.x;
  const int64_t W = t.width;
  const uint16_t* row = table_row(t, 0, codes[static_cast<int64_t>(q / NB) * G]);
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x) {
    out[(2 * static_cast<int64_t>(q)) * W + i] = hidden[q * W + i];
    out[(2 * static_cast<int64_t>(q) + 1) * W + i] = row ? bf16f(row[i]) : 0.0f;
  }
}

__global__ void depth_code_kernel(AudioTable t, const int32_t* codes, int G, int k, int NB, float* out) {
  cuda::dev::pdl_wait();
  const int q = blockIdx.x;
  const int64_t W = t.width;
  const uint16_t* row = table_row(t, k - 1, codes[static_cast<int64_t>(q / NB) * G + k - 1]);
  for (int64_t i = threadIdx.x; i < W; i += blockDim.x) out[q * W + i] = row ? bf16f(row[i]) : 0.0f;
}

// One thread per element (grid: element blocks × rows); the codebook rows are loaded a group at a
// time before any is added (reads in flight together), and summed in codebook order as the CPU does.
constexpr int kRowThreads = 128;
constexpr int kRowGroup = 16;

__global__ void frame_rows_kernel(AudioTable t, const int32_t* codes, int G, int NB, float* out) {
  cuda::dev::pdl_wait();
  const int q = blockIdx.y;
  const int64_t W = t.width;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowThreads + threadIdx.x;
  if (i >= W) return;
  const int32_t* c = codes + static_cast<int64_t>(q / NB) * G;
  float acc = 0.0f;
  for (int k0 = 0; k0 < G; k0 += kRowGroup) {
    float v[kRowGroup];
#pragma unroll
    for (int j = 0; j < kRowGroup; ++j) {
      const uint16_t* row = k0 + j < G ? table_row(t, k0 + j, c[k0 + j]) : nullptr;
      v[j] = row ? bf16f(row[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kRowGroup; ++j)
      if (k0 + j < G) acc = __fadd_rn(acc, v[j]);
  }
  out[q * W + i] = acc;
}

__global__ void guide_kernel(const float* in, int64_t ld_in, const Guide* guides, int NB, int64_t n, float* out,
                             int64_t ld_out) {
  cuda::dev::pdl_wait();
  const int s = blockIdx.y;
  const Guide g = guides[s];
  const float* b0 = in + (static_cast<int64_t>(s) * NB - g.branch) * ld_in;
  const float* b1 = b0 + ld_in;
  const float* b2 = b1 + ld_in;
  float* o = out + s * ld_out;
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float l = b0[i];
    if (g.mode == 1) {
      l = __fadd_rn(b1[i], __fmul_rn(g.s1, __fsub_rn(b0[i], b1[i])));
    } else if (g.mode == 2) {
      l = __fadd_rn(__fadd_rn(b0[i], __fmul_rn(g.s1, __fsub_rn(b1[i], b0[i]))), __fmul_rn(g.s2, __fsub_rn(b2[i], b0[i])));
    }
    o[i] = l;
  }
}

__global__ void advance_kernel(int32_t* frames, const int32_t* prompt_rows, int32_t cap, int32_t* pos, int S, int NB,
                               const int32_t* codes, int G, int32_t* saved) {
  cuda::dev::pdl_wait();
  // One thread per stream, so the counter is read and written by one thread only.
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= S) return;
  const int32_t f = frames[s] + 1;
  frames[s] = f;
  for (int j = 0; j < NB; ++j) {
    const int q = s * NB + j;
    pos[q] = min(prompt_rows[q] + f - 1, cap - 1);
  }
  for (int g = 0; g < G; ++g) saved[s * G + g] = codes[s * G + g];
}

}  // namespace

Status depth_first_rows(const float* hidden, AudioTable t, const int32_t* codes, int G, int S, int NB, float* out,
                        cudaStream_t s) {
  if (S * NB <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(depth_first_kernel, dim3(S * NB), dim3(256), 0, s, hidden, t, codes, G, NB, out));
  return ok_status();
}

Status depth_code_rows(AudioTable t, const int32_t* codes, int G, int k, int S, int NB, float* out, cudaStream_t s) {
  if (S * NB <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(depth_code_kernel, dim3(S * NB), dim3(256), 0, s, t, codes, G, k, NB, out));
  return ok_status();
}

Status frame_rows(AudioTable t, const int32_t* codes, int G, int S, int NB, float* out, cudaStream_t s) {
  if (S * NB <= 0) return ok_status();
  const dim3 grid(static_cast<unsigned>((t.width + kRowThreads - 1) / kRowThreads), static_cast<unsigned>(S * NB));
  CHORUS_CUDA_TRY(cuda::launch(frame_rows_kernel, grid, dim3(kRowThreads), 0, s, t, codes, G, NB, out));
  return ok_status();
}

Status guide_logits(const float* in, int64_t ld_in, const Guide* guides, int S, int NB, int64_t n, float* out,
                    int64_t ld_out, cudaStream_t s) {
  if (S <= 0 || n <= 0) return ok_status();
  const int blocks = static_cast<int>((n + 255) / 256);
  CHORUS_CUDA_TRY(cuda::launch(guide_kernel, dim3(blocks, S), dim3(256), 0, s, in, ld_in, guides, NB, n, out, ld_out));
  return ok_status();
}

Status advance_positions(int32_t* frames, const int32_t* prompt_rows, int32_t capacity, int32_t* pos, int S, int NB,
                         const int32_t* codes, int G, int32_t* saved, cudaStream_t s) {
  if (S <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(advance_kernel, dim3((S + 127) / 128), dim3(128), 0, s, frames, prompt_rows, capacity, pos,
                               S, NB, codes, G, saved));
  return ok_status();
}

}  // namespace chorus::breeze_tts::gpu
