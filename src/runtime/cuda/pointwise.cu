// Row-wise and element-wise kernels: RMS-norm, SwiGLU, embedding gather, f32 → bf16.
#include <cuda_bf16.h>

#include <algorithm>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

__global__ void rms_norm_kernel(const float* x, const float* w, float* y, int64_t dim, float eps) {
  __shared__ double scratch[32];
  dev::pdl_wait();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float inv = dev::block_inv_rms(xr, dim, eps, scratch);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[r * dim + i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i]);
}

// nn::bf16::rms_norm (y may alias x: each thread reads its elements before writing them, and the
// block sum has finished reading the row first).
__global__ void rms_norm_bf16_kernel(const float* x, const float* w, float* y, int64_t dim, float eps) {
  __shared__ double scratch[32];
  dev::pdl_wait();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  const float inv = dev::inv_rms_bf16(dev::block_sum(ss, scratch), dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[r * dim + i] = dev::norm_bf16(xr[i], inv, w[i]);
}

__global__ void round_bf16_kernel(float* x, int64_t n) {
  dev::pdl_wait();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = dev::round_bf16(x[i]);
}

__global__ void silu_mul_kernel(const float* g, const float* u, float* out, int64_t n) {
  dev::pdl_wait();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __fmul_rn(__fmul_rn(g[i], dev::sigmoid_f32(g[i])), u[i]);
}

__global__ void embedding_kernel(const uint16_t* table, int64_t rows, int64_t dim, const int32_t* ids, float* out) {
  dev::pdl_wait();
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  const bool ok = id >= 0 && id < rows;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
    out[i * dim + d] = ok ? dev::bf16_bits_to_f32(table[id * dim + d]) : 0.0f;
}

__global__ void f32_to_bf16_kernel(const float* src, uint16_t* dst, int64_t n) {
  dev::pdl_wait();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 b = __float2bfloat16_rn(src[i]);
    dst[i] = *reinterpret_cast<const uint16_t*>(&b);
  }
}

unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 4096)));
}

}  // namespace

Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps, cudaStream_t s,
                bool bf16) {
  if (rows <= 0 || dim <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(bf16 ? rms_norm_bf16_kernel : rms_norm_kernel, dim3(static_cast<unsigned>(rows)), dim3(256),
                         0, s, x, weight, y, dim, eps));
  return ok_status();
}

Status round_bf16(float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(round_bf16_kernel, dim3(grid_for(n, 256)), dim3(256), 0, s, x, n));
  return ok_status();
}

Status silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(silu_mul_kernel, dim3(grid_for(n, 256)), dim3(256), 0, s, gate, up, out, n));
  return ok_status();
}

Status embedding(const DeviceMatrix& table, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0 || table.cols <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(embedding_kernel, dim3(static_cast<unsigned>(n)), dim3(128), 0, s, table.data, table.rows,
                         table.cols, ids, out));
  return ok_status();
}

Status f32_to_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(f32_to_bf16_kernel, dim3(grid_for(n, 256)), dim3(256), 0, s, src, dst, n));
  return ok_status();
}

}  // namespace chorus::cuda
