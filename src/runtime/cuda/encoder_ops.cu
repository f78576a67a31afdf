// Kernels of the bidirectional encoder (encoder_ops.h). Numerics follow the CPU TextEncoder: f64
// RMS sums, GELU and softmax denominators, products written with explicit rounding so the compiler
// does not contract them into FMAs the CPU does not use.
#include <cuda_bf16.h>

#include <algorithm>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/encoder_ops.h"
#include "runtime/cuda/launch.cuh"

namespace chorus::cuda {

namespace {

__device__ __forceinline__ float bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ float maybe_round(float v, bool r) { return r ? bf16_round(v) : v; }

unsigned flat_grid(int64_t n, int threads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 8192)));
}

__global__ void scaled_embedding_kernel(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids,
                                        float scale, int32_t special_id, const float* special_row, bool rnd,
                                        float* out) {
  dev::pdl_wait();
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r];
  const bool special = special_row != nullptr && id == special_id;
  const bool ok = id >= 0 && id < vocab;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    float v = 0.0f;
    if (special) v = special_row[d];
    else if (ok) v = maybe_round(__fmul_rn(dev::bf16_bits_to_f32(table[id * dim + d]), scale), rnd);
    out[r * dim + d] = v;
  }
}

__global__ void norm_rows_kernel(const float* x, const float* w, float* y, float* residual, int64_t dim, float eps,
                                 bool rnd) {
  __shared__ double scratch[32];
  dev::pdl_wait();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float inv = dev::block_inv_rms(xr, dim, eps, scratch);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float n = maybe_round(__fmul_rn(__fmul_rn(xr[i], inv), w[i]), rnd);
    if (residual) residual[r * dim + i] = maybe_round(__fadd_rn(residual[r * dim + i], n), rnd);
    else y[r * dim + i] = n;
  }
}

__global__ void round_kernel(float* x, int64_t n) {
  dev::pdl_wait();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = bf16_round(x[i]);
}

// One thread per (row, head, rotation pair).
__global__ void rope_rows_kernel(float* x, int64_t rows, int64_t heads, int64_t hd, const int32_t* pos,
                                 const float* inv_freq, bool rnd) {
  dev::pdl_wait();
  const int64_t half = hd / 2, n = rows * heads * half;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % half, rh = t / half, r = rh / heads;
    const float angle = __fmul_rn(static_cast<float>(pos[r]), inv_freq[i]);
    float* xh = x + rh * hd;
    const float a = xh[i], b = xh[i + half];
    if (rnd) {
      const float c = bf16_round(cosf(angle)), s = bf16_round(sinf(angle));
      xh[i] = bf16_round(__fsub_rn(bf16_round(__fmul_rn(a, c)), bf16_round(__fmul_rn(b, s))));
      xh[i + half] = bf16_round(__fadd_rn(bf16_round(__fmul_rn(b, c)), bf16_round(__fmul_rn(a, s))));
    } else {
      const float c = cosf(angle), s = sinf(angle);
      xh[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
      xh[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
  }
}

__global__ void gelu_tanh_mul_kernel(const float* g, const float* u, float* out, int64_t n, bool rnd) {
  dev::pdl_wait();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double x = g[i];
    const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);  // sqrt(2/pi)
    const float act = maybe_round(static_cast<float>(0.5 * x * (1.0 + tanh(inner))), rnd);
    out[i] = maybe_round(__fmul_rn(act, u[i]), rnd);
  }
}

// One block per (row, query head): scores of the visible keys in shared memory, softmax with an f64
// denominator, then each thread owns output dimensions.
__global__ void window_attention_kernel(WindowAttention a, PackedRows rows) {
  extern __shared__ float smem[];
  __shared__ float scratch_f[32];
  __shared__ double scratch_d[32];
  dev::pdl_wait();
  const int64_t r = blockIdx.x, h = blockIdx.y, hd = a.h.head_dim;
  const int64_t nq = a.h.q_heads, nkv = a.h.kv_heads, kvh = h / (nq / nkv);
  const int64_t i = rows.pos[r], start = rows.seq_start[r], len = rows.seq_len[r];
  int64_t lo = 0, hi = len;
  if (!a.full) {
    lo = i - a.left + 1 > 0 ? i - a.left + 1 : 0;
    hi = i + a.right < len ? i + a.right : len;
  }
  const int64_t n = hi - lo;
  float* qs = smem;        // [hd]
  float* sc = smem + hd;   // [n]
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = a.q[(r * nq + h) * hd + d];
  __syncthreads();
  float mx = -__int_as_float(0x7f800000);
  for (int64_t jj = threadIdx.x; jj < n; jj += blockDim.x) {
    const float* kj = a.k + ((start + lo + jj) * nkv + kvh) * hd;
    double dot = 0.0;
    for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qs[d]) * kj[d];
    float s = static_cast<float>(dot);
    s = a.round_bf16 ? bf16_round(__fmul_rn(bf16_round(s), a.scale)) : __fmul_rn(s, a.scale);
    sc[jj] = s;
    mx = fmaxf(mx, s);
  }
  mx = dev::block_max(mx, scratch_f);
  double sum = 0.0;
  for (int64_t jj = threadIdx.x; jj < n; jj += blockDim.x) {
    const float e = expf(sc[jj] - mx);
    sc[jj] = e;
    sum += e;
  }
  sum = dev::block_sum(sum, scratch_d);  // synchronises, so every score is written
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    double acc = 0.0;
    for (int64_t jj = 0; jj < n; ++jj) {
      float w = static_cast<float>(sc[jj] / sum);
      if (a.round_bf16) w = bf16_round(w);
      acc += static_cast<double>(w) * a.v[((start + lo + jj) * nkv + kvh) * hd + d];
    }
    a.out[(r * nq + h) * hd + d] = maybe_round(static_cast<float>(acc), a.round_bf16);
  }
}

}  // namespace

Status scaled_embedding(const DeviceMatrix& table, const int32_t* ids, int64_t n, float scale, int32_t special_id,
                        const float* special_row, bool round_bf16, float* out, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(scaled_embedding_kernel, dim3(static_cast<unsigned>(n)), dim3(128), 0, s, table.data,
                         table.rows, table.cols, ids, scale, special_id, special_row, round_bf16, out));
  return ok_status();
}

Status norm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps, bool round_bf16,
                 cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(norm_rows_kernel, dim3(static_cast<unsigned>(rows)), dim3(dim >= 256 ? 256 : 64), 0, s, x, w,
                         y, static_cast<float*>(nullptr), dim, eps, round_bf16));
  return ok_status();
}

Status norm_add_rows(const float* x, const float* w, float* residual, int64_t rows, int64_t dim, float eps,
                     bool round_bf16, cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(norm_rows_kernel, dim3(static_cast<unsigned>(rows)), dim3(dim >= 256 ? 256 : 64), 0, s, x, w,
                         static_cast<float*>(nullptr), residual, dim, eps, round_bf16));
  return ok_status();
}

Status round_bf16_inplace(float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(round_kernel, dim3(flat_grid(n, 256)), dim3(256), 0, s, x, n));
  return ok_status();
}

Status rope_rows(float* x, int64_t heads, int64_t head_dim, PackedRows rows, const float* inv_freq, bool round_bf16,
                 cudaStream_t s) {
  const int64_t n = rows.rows * heads * (head_dim / 2);
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(rope_rows_kernel, dim3(flat_grid(n, 256)), dim3(256), 0, s, x, rows.rows, heads, head_dim,
                         rows.pos, inv_freq, round_bf16));
  return ok_status();
}

Status gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n, bool round_bf16, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(launch(gelu_tanh_mul_kernel, dim3(flat_grid(n, 256)), dim3(256), 0, s, gate, up, out, n, round_bf16));
  return ok_status();
}

Status window_attention(const WindowAttention& a, PackedRows rows, int64_t longest_seq, cudaStream_t s) {
  if (rows.rows <= 0) return ok_status();
  if (a.h.kv_heads <= 0 || a.h.q_heads % a.h.kv_heads != 0 || a.h.head_dim <= 0 || a.h.head_dim > 1024)
    return make_error(ErrorCode::kInvalidArgument, "window attention: bad head shape");
  if (longest_seq > kMaxAttentionKeys)
    return make_error(ErrorCode::kOutOfRange, "window attention: a sequence of " + std::to_string(longest_seq) +
                                                  " rows exceeds the GPU encoder's " +
                                                  std::to_string(kMaxAttentionKeys));
  const size_t smem = static_cast<size_t>(a.h.head_dim + longest_seq) * sizeof(float);
  static const cudaError_t opted = cudaFuncSetAttribute(
      window_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>((kMaxAttentionKeys + 1024) * sizeof(float)));
  CHORUS_CUDA_TRY(opted);
  CHORUS_CUDA_TRY(launch(window_attention_kernel, dim3(static_cast<unsigned>(rows.rows), static_cast<unsigned>(a.h.q_heads)),
                         dim3(128), smem, s, a, rows));
  return ok_status();
}

}  // namespace chorus::cuda
