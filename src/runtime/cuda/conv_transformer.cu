// Codec-decoder kernels, part 2: RVQ sums, the decoder transformer's rope / ring-buffer KV store /
// sliding-window attention, and the row ops of the transformer and the ConvNeXt blocks
// (conv_ops.h). Formulas follow the CPU kernels (runtime/cpu); statistics the CPU sums in f64
// (LayerNorm) are f64 here too.
#include <string>

#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/device_util.cuh"

namespace chorus::cuda::codec_ops {

namespace {

constexpr int kThreads = 256;
constexpr int kAttnThreads = 128;
constexpr int64_t kMaxWindow = 8192;  // scores of one row live in shared memory

inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
Status launched(const char* what) { return check(cudaGetLastError(), what); }

__global__ void rvq_kernel(const int32_t* codes, int64_t n, int64_t Q, int64_t nsem, const float* tables,
                           int64_t cb, int64_t dim, float* sem, float* ac) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * dim) return;
  const int64_t t = i / dim, j = i % dim;
  const int32_t* c = codes + t * Q;
  auto at = [&](int64_t k) { return tables[(k * cb + c[k]) * dim + j]; };
  float s = at(0);
  for (int64_t k = 1; k < nsem; ++k) s += at(k);
  float a = at(nsem);
  for (int64_t k = nsem + 1; k < Q; ++k) a += at(k);
  sem[i] = s;
  ac[i] = a;
}

__global__ void rope_store_kernel(RopeStore a, int64_t total) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < total) rope_store_element(a, idx);
}

// One block per (row, query head): scores of the visible keys of the row's own stream in shared
// memory, f32 softmax. Row r is row r mod n of stream r / n.
__global__ void window_attention_kernel(const float* q, int64_t n, int64_t Hq, int64_t Hkv, int64_t D,
                                        int64_t window, float scale, StreamKv kv, float* out) {
  extern __shared__ float smem[];
  __shared__ float red[32];
  const int64_t r = blockIdx.x, h = blockIdx.y, g = h / (Hq / Hkv), b = r / n;
  const int64_t p = kv.pos0[b] + r % n, first = window_first(p, window), nk = p - first + 1;
  float* qs = smem;       // [D]
  float* sc = smem + D;   // [nk]
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = q[(r * Hq + h) * D + d];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t j = warp; j < nk; j += warps) {
    const float* k = kv_row(kv, b, false, first + j) + g * D;
    float acc = 0.0f;
    for (int64_t d = lane; d < D; d += 32) acc += qs[d] * k[d];
    acc = dev::warp_sum(acc);
    if (lane == 0) sc[j] = acc * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) m = fmaxf(m, sc[j]);
  m = dev::block_max(m, red);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    const float e = expf(sc[j] - m);
    sc[j] = e;
    sum += e;
  }
  sum = dev::block_sum(sum, red);  // ends with a barrier: every sc[j] is written
  const float inv = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < nk; ++j) acc += sc[j] * kv_row(kv, b, true, first + j)[g * D + d];
    out[(r * Hq + h) * D + d] = acc * inv;
  }
}

__global__ void scaled_add_kernel(float* h, const float* x, const float* scale, int64_t rows, int64_t dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * dim) h[i] += scale[i % dim] * x[i];
}

__global__ void swiglu_kernel(const float* gu, int64_t n, int64_t I, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * I) return;
  const int64_t r = i / I, c = i % I;
  const float g = gu[r * 2 * I + c], u = gu[r * 2 * I + I + c];
  out[i] = g * dev::sigmoid_f32(g) * u;
}

__global__ void bias_gelu_kernel(float* x, const float* bias, int64_t rows, int64_t dim) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * dim) return;
  const float v = x[i] + bias[i % dim];
  x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// One warp per time step t (a column of the channels-first input).
__global__ void layer_norm_columns_kernel(const float* x, int64_t C, int64_t T, const float* w, const float* b,
                                          float eps, float* rows) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (t >= T) return;
  double sum = 0.0;
  for (int64_t c = lane; c < C; c += 32) sum += x[c * T + t];
  const double mean = dev::warp_sum(sum) / static_cast<double>(C);
  double var = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    const double d = x[c * T + t] - mean;
    var += d * d;
  }
  var = dev::warp_sum(var) / static_cast<double>(C);
  const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  const float m = static_cast<float>(mean);
  for (int64_t c = lane; c < C; c += 32) rows[t * C + c] = (x[c * T + t] - m) * inv * w[c] + b[c];
}

__global__ void convnext_residual_kernel(const float* up, const float* pw, const float* bias, const float* gamma,
                                         int64_t C, int64_t T, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= C * T) return;
  const int64_t c = i / T;
  y[i] = up[i] + (pw[i] + bias[c]) * gamma[c];
}

}  // namespace

Status rvq_sums(const int32_t* codes, int64_t n, int64_t quantizers, int64_t semantic, const float* tables,
                int64_t codebook_size, int64_t dim, float* sem, float* ac, cudaStream_t s) {
  if (semantic < 1 || semantic >= quantizers)
    return make_error(ErrorCode::kInvalidArgument, "rvq_sums: needs semantic and acoustic codebooks");
  if (n * dim == 0) return ok_status();
  rvq_kernel<<<blocks_for(n * dim), kThreads, 0, s>>>(codes, n, quantizers, semantic, tables, codebook_size, dim,
                                                       sem, ac);
  return launched("rvq_sums");
}

Status rope_store(const RopeStore& a, cudaStream_t s) {
  if (a.n < 0 || a.streams < 1 || a.head_dim % 2 != 0)
    return make_error(ErrorCode::kInvalidArgument, "rope_store: bad rows, streams or head size");
  const int64_t total = rope_store_elements(a);
  if (total == 0) return ok_status();
  rope_store_kernel<<<blocks_for(total), kThreads, 0, s>>>(a, total);
  return launched("rope_store");
}

Status window_attention(const float* q, int64_t n, int64_t streams, int64_t q_heads, int64_t kv_heads,
                        int64_t head_dim, int64_t window, float scale, const StreamKv& kv, float* out, cudaStream_t s) {
  if (window < 1 || window > kMaxWindow || kv_heads < 1 || q_heads % kv_heads != 0 || streams < 1)
    return make_error(ErrorCode::kInvalidArgument, "window_attention: window, heads or streams out of range");
  if (n == 0) return ok_status();
  if (n * streams > 0x7fffffffLL || q_heads > 65535)
    return make_error(ErrorCode::kOutOfRange, "window_attention: too many rows or heads for one launch");
  const size_t smem = sizeof(float) * static_cast<size_t>(head_dim + window);
  window_attention_kernel<<<dim3(static_cast<unsigned>(n * streams), static_cast<unsigned>(q_heads)), kAttnThreads,
                            smem, s>>>(q, n, q_heads, kv_heads, head_dim, window, scale, kv, out);
  return launched("window_attention");
}

Status scaled_add(float* h, const float* x, const float* scale, int64_t rows, int64_t dim, cudaStream_t s) {
  if (rows * dim == 0) return ok_status();
  scaled_add_kernel<<<blocks_for(rows * dim), kThreads, 0, s>>>(h, x, scale, rows, dim);
  return launched("scaled_add");
}

Status swiglu_rows(const float* gu, int64_t n, int64_t inter, float* out, cudaStream_t s) {
  if (n * inter == 0) return ok_status();
  swiglu_kernel<<<blocks_for(n * inter), kThreads, 0, s>>>(gu, n, inter, out);
  return launched("swiglu_rows");
}

Status bias_gelu_rows(float* x, const float* bias, int64_t rows, int64_t dim, cudaStream_t s) {
  if (rows * dim == 0) return ok_status();
  bias_gelu_kernel<<<blocks_for(rows * dim), kThreads, 0, s>>>(x, bias, rows, dim);
  return launched("bias_gelu_rows");
}

Status layer_norm_columns(const float* x, int64_t channels, int64_t steps, const float* weight, const float* bias,
                          float eps, float* rows, cudaStream_t s) {
  if (steps == 0) return ok_status();
  constexpr int kWarps = kThreads / 32;
  layer_norm_columns_kernel<<<static_cast<unsigned>((steps + kWarps - 1) / kWarps), kThreads, 0, s>>>(
      x, channels, steps, weight, bias, eps, rows);
  return launched("layer_norm_columns");
}

Status convnext_residual(const float* up, const float* pw, const float* bias, const float* gamma, int64_t channels,
                         int64_t steps, float* y, cudaStream_t s) {
  if (channels * steps == 0) return ok_status();
  convnext_residual_kernel<<<blocks_for(channels * steps), kThreads, 0, s>>>(up, pw, bias, gamma, channels, steps, y);
  return launched("convnext_residual");
}

}  // namespace chorus::cuda::codec_ops
