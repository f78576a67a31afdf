// Device-side helpers shared by the kernels: cp.async, warp and block reductions, bf16 unpacking.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace chorus::cuda::dev {

// ---- cp.async: copies to shared memory in flight beside the threads' work ----------------------
// 16 bytes from global to shared memory through L2 only (.cg); the bytes past src_bytes are zero
// (src_bytes 0: nothing is read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

// The two bf16 values packed in one 32-bit word (low half first in memory).
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// The eight bf16 values of one 16-byte weight chunk, in memory order.
__device__ __forceinline__ void unpack8(uint4 w, float (&f)[8]) {
  f[0] = bf16_lo(w.x); f[1] = bf16_hi(w.x); f[2] = bf16_lo(w.y); f[3] = bf16_hi(w.y);
  f[4] = bf16_lo(w.z); f[5] = bf16_hi(w.z); f[6] = bf16_lo(w.w); f[7] = bf16_hi(w.w);
}

// The L2 policy of weight loads, made once per thread: evict-first. Weights are streamed once per
// step and outnumber L2 many times over, so they should not push out the KV caches and
// activations (measured on the H200: Qwen3-TTS and Breeze decode faster; made per load instead,
// Breeze is 6 % slower).
__device__ __forceinline__ uint64_t weight_l2_policy() {
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// One 16-byte weight chunk, kept out of L1, with the policy of weight_l2_policy.
__device__ __forceinline__ uint4 load_weights(const uint16_t* p, uint64_t policy) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(policy));
  return r;
}

// Block `part` of `parts` asks L2 to fetch its share of [ptr, ptr + bytes) (16-byte aligned inside
// the range, so nothing outside it is touched). Asynchronous: nothing waits for it.
__device__ __forceinline__ void prefetch_l2_share(const void* ptr, uint64_t bytes, unsigned part, unsigned parts) {
  if (!ptr || bytes < 16) return;
  const uint64_t first = (reinterpret_cast<uint64_t>(ptr) + 15) & ~uint64_t{15};
  const uint64_t end = (reinterpret_cast<uint64_t>(ptr) + bytes) & ~uint64_t{15};
  if (end <= first) return;
  const uint64_t share = ((end - first) / parts + 15) & ~uint64_t{15};
  const uint64_t a = first + share * part;
  if (a >= end) return;
  uint64_t n = min(share, end - a);
  for (uint64_t at = a; n > 0;) {  // the size operand is 32-bit: pieces of at most 2^31 − 16 bytes
    const uint32_t piece = static_cast<uint32_t>(n < 0x7ffffff0ull ? n : 0x7ffffff0ull);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(piece) : "memory");
    at += piece;
    n -= piece;
  }
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; every thread gets the result. `scratch` holds 32 T. All threads must call it.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < warps ? scratch[lane] : T(0);
  if (warp == 0) {
    r = warp_sum(r);
    if (lane == 0) scratch[0] = r;
  }
  __syncthreads();
  return scratch[0];
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -__int_as_float(0x7f800000);
  if (warp == 0) {
    r = warp_max(r);
    if (lane == 0) scratch[0] = r;
  }
  __syncthreads();
  return scratch[0];
}

// 1 / sqrt(mean(x²) + eps) as cpu::rms_norm computes it (sum of squares in f64), for one row,
// block-wide. `scratch` holds 32 doubles.
__device__ __forceinline__ float block_inv_rms(const float* x, int64_t dim, float eps, double* scratch) {
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
  ss = block_sum(ss, scratch);
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + static_cast<double>(eps)));
}

__device__ __forceinline__ float sigmoid_f32(float v) { return 1.0f / (1.0f + expf(-v)); }

// ---- bf16-activation mode (nn::Rounding::kBF16 on the CPU, nn/bf16_ops.h) ----------------------

// v stored as bf16 (round to nearest even), held in f32.
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// 1 / RMS as nn::bf16::rms_norm computes it from the f64 sum of squares: f32 mean, sqrt and division.
__device__ __forceinline__ float inv_rms_bf16(double ss, int64_t dim, float eps) {
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(static_cast<float>(ss / static_cast<double>(dim)), eps)));
}

// One normed element as HF Qwen3RMSNorm under bf16: bf16(w · bf16(x · inv)).
__device__ __forceinline__ float norm_bf16(float x, float inv, float w) {
  return round_bf16(__fmul_rn(w, round_bf16(__fmul_rn(x, inv))));
}

// bf16(bf16(silu(bf16 g)) · bf16 u): act_fn(gate) is a stored tensor (silu as nn::bf16::silu_mul).
__device__ __forceinline__ float swiglu_bf16(float g, float u) {
  g = round_bf16(g);
  const float act = round_bf16(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
  return round_bf16(__fmul_rn(act, round_bf16(u)));
}

// ---- shared by the matrix-vector kernels (linear.cu, mlp.cu) -----------------------------------

// Σ x[k]² over a row of K floats (K a multiple of 4, x 16-byte aligned) by one warp, in f64: lane l
// sums k = 4l + 128i in order, then the butterfly. linear's single-row kernel and fused_mlp share it,
// so their 1 / RMS values are bit-identical. (decode_stack keeps its own copy of the loop: calling
// this cost that kernel, at its 128-register cap, a 4-byte spill.)
__device__ __forceinline__ double warp_sum_squares(const float* x, int64_t K) {
  const int lane = threadIdx.x & 31;
  double ss = 0.0;
  for (int64_t k = lane * 4; k < K; k += 128) {
    const float4 v = *reinterpret_cast<const float4*>(x + k);
    ss += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
          static_cast<double>(v.w) * v.w;
  }
  return warp_sum(ss);
}

// warp_sum_squares for a row of exactly 1024 (the depth decoder's), the same sums in the same order,
// with all 8 of a lane's loads issued before the first sum: the launch then waits on one round trip
// to L2 after its PDL wait, where the loop above, as compiled, waits three times (Nsight Compute).
// Only the kernels of such rows call it: compiled into the kernels of rows of 2048 too (a run-time
// choice), it costs the backbone's q/k/v launch 1.3 µs.
__device__ __forceinline__ double warp_sum_squares_1024(const float* x) {
  const int lane = threadIdx.x & 31;
  float4 v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = *reinterpret_cast<const float4*>(x + lane * 4 + 128 * j);
  double ss = 0.0;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    ss += static_cast<double>(v[j].x) * v[j].x + static_cast<double>(v[j].y) * v[j].y +
          static_cast<double>(v[j].z) * v[j].z + static_cast<double>(v[j].w) * v[j].w;
  return warp_sum(ss);
}

// 1 / RMS from a row's f64 sum of squares: cpu::rms_norm's formula, or nn::bf16::rms_norm's.
__device__ __forceinline__ float inv_rms(double ss, int64_t K, float eps, bool bf16) {
  if (bf16) return inv_rms_bf16(ss, K, eps);
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(K) + static_cast<double>(eps)));
}

// One output value v (bias included) into *y: stored (epi 0), or added to the residual stream
// (epi 1); with bf16, the product is rounded first and the sum after (both are stored tensors
// upstream).
__device__ __forceinline__ void store_out(float* y, float v, int epi, bool bf16) {
  if (bf16) {
    v = round_bf16(v);
    *y = epi == 1 ? round_bf16(*y + v) : v;
    return;
  }
  *y = epi == 1 ? *y + v : v;
}

__device__ __forceinline__ float swiglu_out(float g, float u, bool bf16) {
  return bf16 ? swiglu_bf16(g, u) : __fmul_rn(__fmul_rn(g, sigmoid_f32(g)), u);
}

// The eight norm weights g[k..k+8) (loaded ahead of their use, e.g. before a kernel's wait).
__device__ __forceinline__ void load_w8(const float* g, int64_t k, float (&gv)[8]) {
  const float4 ga = *reinterpret_cast<const float4*>(g + k);
  const float4 gb = *reinterpret_cast<const float4*>(g + k + 4);
  gv[0] = ga.x; gv[1] = ga.y; gv[2] = ga.z; gv[3] = ga.w; gv[4] = gb.x; gv[5] = gb.y; gv[6] = gb.z; gv[7] = gb.w;
}

// v[j] RMS-normed with `inv` and the weights gv (f32: (x·inv)·g; bf16: norm_bf16), in place.
__device__ __forceinline__ void norm8(float (&v)[8], const float (&gv)[8], float inv, bool bf16) {
  if (bf16) {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = norm_bf16(v[j], inv, gv[j]);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(__fmul_rn(v[j], inv), gv[j]);
  }
}

// Eight consecutive inputs x[k..k+8) of a row.
__device__ __forceinline__ void load_f8(const float* xr, int64_t k, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(xr + k);
  const float4 b = *reinterpret_cast<const float4*>(xr + k + 4);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

// Eight consecutive inputs x[k..k+8) of a row, RMS-normed with `inv` and weights g when g is set.
__device__ __forceinline__ void load_x8(const float* xr, int64_t k, const float* g, float inv, bool bf16,
                                        float (&v)[8]) {
  load_f8(xr, k, v);
  if (g) {
    float gv[8];
    load_w8(g, k, gv);
    norm8(v, gv, inv, bf16);
  }
}

// load_x8 with the norm weights already in registers.
__device__ __forceinline__ void load_x8_normed(const float* xr, int64_t k, const float (&gv)[8], float inv, bool bf16,
                                               float (&v)[8]) {
  load_f8(xr, k, v);
  norm8(v, gv, inv, bf16);
}

}  // namespace chorus::cuda::dev
