// The persistent single-row decoder stack (decode_stack.h). One 512-thread block per SM, launched
// cooperatively so all blocks are resident.
//
// Matrix phases: block b owns the contiguous feature rows [b·F/G, (b+1)·F/G) of the phase (G blocks)
// and receives them whole in shared memory by bulk asynchronous copies (TMA), issued about a phase
// ahead into one of two buffers (qkv and gate/up alternate in one, o and down in the other), so
// the weight stream runs on under barriers and costs no registers. Within the block
// row r goes to warp r mod 16; a lane reads 16 bytes (8 bf16) per chunk, chunk i covering
// k = 8·lane + 256·i, summed in i order and then over lanes by a butterfly: the order of
// cuda::linear's single-row kernel, so the results are bit-identical. The phase input is staged once
// per block in shared memory (RMS-normed there when the phase has a norm), read through L2 because
// other blocks wrote it.
//
// Quantised stacks (int8 / fp8): a block's rows arrive as their codes, then their f16 scales (two
// bulk copies per matrix segment, about half the bytes of bf16 rows), and a lane reads 16 codes at
// k = 16·lane + 512·i, dequantised as the quantised matrix-vector kernel (linear_quant.cu) does and
// summed in its order, so the results are bit-identical to that kernel's.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"
#include "runtime/cuda/attend_head.cuh"
#include "runtime/cuda/bulk_copy.cuh"
#include "runtime/cuda/quant_util.cuh"

namespace chorus::cuda {

namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;

// The rows of one matrix phase: up to three stacked matrices (q, k, v), or gate and up (NW = 2).
struct Mat {
  const uint16_t* w[3];
  int64_t n0, n1;  // rows of w[0] and w[1] (NW = 1 segments)
  int64_t F, K;    // features, input width (a multiple of 256)
  const uint8_t* c[3];   // quantised stacks: the codes and scales of w[0..2]'s rows
  const uint16_t* s[3];
};

// x (written by other blocks) → xs in shared memory, RMS-normed with `g` when given: the sum of
// squares as cuda::linear's single-row kernel forms it (lane-strided float4s in f64, one warp).
// (Every warp forming the sum itself measured no faster, in a copy schedule where staging queued
// behind the weight copies; not measured with the current one.)
template <bool BF16>
__device__ void stage(const float* x, int64_t K, const float* g, float eps, float* xs, float* inv_s) {
  // The norm weights of inputs up to kNormRegs·kThreads wide are loaded with x, into registers, so
  // their round trip overlaps x's instead of following the sum of squares.
  constexpr int kNormRegs = 4;
  const bool g_early = g && K <= kNormRegs * kThreads;
  float gv[kNormRegs];
#pragma unroll
  for (int i = 0; i < kNormRegs; ++i) {
    const int64_t k = threadIdx.x + static_cast<int64_t>(i) * kThreads;
    gv[i] = g_early && k < K ? g[k] : 0.0f;
  }
  for (int64_t k = threadIdx.x * 4; k < K; k += kThreads * 4)
    *reinterpret_cast<float4*>(xs + k) = __ldcg(reinterpret_cast<const float4*>(x + k));
  __syncthreads();
  if (!g) return;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    double ss = 0.0;
    for (int64_t k = lane * 4; k < K; k += 128) {
      const float4 v = *reinterpret_cast<const float4*>(xs + k);
      ss += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
            static_cast<double>(v.w) * v.w;
    }
    ss = dev::warp_sum(ss);
    if (lane == 0)
      *inv_s = BF16 ? dev::inv_rms_bf16(ss, K, eps)
                    : static_cast<float>(1.0 / sqrt(ss / static_cast<double>(K) + static_cast<double>(eps)));
  }
  __syncthreads();
  const float inv = *inv_s;
  const auto normed = [&](float v, float w) {
    return BF16 ? dev::norm_bf16(v, inv, w) : __fmul_rn(__fmul_rn(v, inv), w);
  };
  if (g_early) {
#pragma unroll
    for (int i = 0; i < kNormRegs; ++i) {
      const int64_t k = threadIdx.x + static_cast<int64_t>(i) * kThreads;
      if (k < K) xs[k] = normed(xs[k], gv[i]);
    }
  } else {
    for (int64_t k = threadIdx.x; k < K; k += kThreads) xs[k] = normed(xs[k], g[k]);
  }
  __syncthreads();
}

// Rows of a phase per block, at most: the shared-memory buffers are sized by it.
__host__ __device__ inline int64_t rows_per_block(int64_t F, int64_t blocks) { return (F + blocks - 1) / blocks; }

// Bytes of one weight row of K inputs in shared memory: bf16 values, or codes and their scales.
__host__ __device__ inline int64_t row_bytes(int64_t K, bool quant) { return quant ? K + K / 16 : 2 * K; }

// Bytes of the two weight buffers: [0] holds a layer's qkv and gate/up rows, [1] its o and down rows.
struct WeightBuffers {
  int64_t bytes[2];
};
__host__ __device__ inline WeightBuffers weight_buffers(int64_t H, int64_t qkv_rows, int64_t qw, int64_t I,
                                                        int64_t blocks, bool quant) {
  const int64_t qkv = rows_per_block(qkv_rows, blocks) * row_bytes(H, quant);
  const int64_t gu = 2 * rows_per_block(I, blocks) * row_bytes(H, quant);
  const int64_t o = rows_per_block(H, blocks) * row_bytes(qw, quant);
  const int64_t down = rows_per_block(H, blocks) * row_bytes(I, quant);
  return {{qkv > gu ? qkv : gu, o > down ? o : down}};
}

using dev::bulk_copy;
using dev::bulk_copy_weights;
using dev::mbar_expect_bytes;
using dev::mbar_wait;
using dev::smem_addr;

// A quantised block's rows of `m` → dst: for each weight row set n < NW, the rows' codes
// (dst + n·rows·K), then for each the rows' scales (after all codes). Completes on `bar`.
template <int NW>
__device__ void issue_quant_rows(const Mat& m, int64_t r0, int64_t r1, uint16_t* dst, uint64_t* bar) {
  const int64_t rows = r1 - r0, K = m.K, G = m.K / 32;
  mbar_expect_bytes(bar, rows * (K + 2 * G) * NW);
  if (rows <= 0) return;
  uint8_t* cd = reinterpret_cast<uint8_t*>(dst);
  uint16_t* sd = reinterpret_cast<uint16_t*>(cd + NW * rows * K);
  if constexpr (NW == 2) {
    for (int n = 0; n < 2; ++n) {
      bulk_copy_weights(cd + n * rows * K, m.c[n] + r0 * K, rows * K, bar);
      bulk_copy_weights(sd + n * rows * G, m.s[n] + r0 * G, rows * G * 2, bar);
    }
  } else {
    const int64_t seg_end[3] = {m.n0, m.n0 + m.n1, m.F};
    int64_t seg_begin = 0;
    for (int s = 0; s < 3; seg_begin = seg_end[s], ++s) {
      const int64_t a = max(r0, seg_begin), b = min(r1, seg_end[s]);
      if (a >= b) continue;
      bulk_copy_weights(cd + (a - r0) * K, m.c[s] + (a - seg_begin) * K, (b - a) * K, bar);
      bulk_copy_weights(sd + (a - r0) * G, m.s[s] + (a - seg_begin) * G, (b - a) * G * 2, bar);
    }
  }
}

// This block's rows of `m` → dst (for NW = 2 the gate rows, then the up rows), completing on `bar`.
// Thread 0 only, after a block barrier that ended all reads of dst.
template <int NW, int QF>
__device__ void issue_rows(const Mat& m, uint16_t* dst, uint64_t* bar) {
  const int64_t r0 = blockIdx.x * m.F / gridDim.x, r1 = (blockIdx.x + 1) * m.F / gridDim.x;
  const int64_t row_bytes = m.K * 2;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // earlier generic reads of dst come first
  if constexpr (QF != 0) {
    issue_quant_rows<NW>(m, r0, r1, dst, bar);
    return;
  }
  mbar_expect_bytes(bar, (r1 - r0) * row_bytes * NW);
  if (r1 <= r0) return;
  if constexpr (NW == 2) {
    bulk_copy_weights(dst, m.w[0] + r0 * m.K, (r1 - r0) * row_bytes, bar);
    bulk_copy_weights(dst + (r1 - r0) * m.K, m.w[1] + r0 * m.K, (r1 - r0) * row_bytes, bar);
  } else {
    const int64_t seg_end[3] = {m.n0, m.n0 + m.n1, m.F};
    int64_t seg_begin = 0;
    for (int s = 0; s < 3; seg_begin = seg_end[s], ++s) {
      const int64_t a = max(r0, seg_begin), b = min(r1, seg_end[s]);
      if (a < b) bulk_copy_weights(dst + (a - r0) * m.K, m.w[s] + (a - seg_begin) * m.K, (b - a) * row_bytes, bar);
    }
  }
}

// Row r's products of a quantised block (issue_quant_rows' layout) with the staged input xs → acc.
template <int NW, int QF>
__device__ __forceinline__ void quant_row_dots(const Mat& m, const float* xs, const uint16_t* wb, int64_t rows,
                                               int64_t r, float (&acc)[NW]) {
  const int lane = threadIdx.x & 31;
  const int64_t K = m.K, G = m.K / 32;
  const uint8_t* cb = reinterpret_cast<const uint8_t*>(wb);
  const uint16_t* sb = reinterpret_cast<const uint16_t*>(cb + NW * rows * K);
#pragma unroll 1
  for (int64_t k = lane * dev::kCodeChunk; k < K; k += dev::kCodeStride) {
    float xv[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 v = *reinterpret_cast<const float4*>(xs + k + 4 * q);
      xv[4 * q] = v.x;
      xv[4 * q + 1] = v.y;
      xv[4 * q + 2] = v.z;
      xv[4 * q + 3] = v.w;
    }
#pragma unroll
    for (int n = 0; n < NW; ++n) {
      float wf[16];
      dev::dequant16<QF>(*reinterpret_cast<const uint4*>(cb + (n * rows + r) * K + k),
                         dev::f16_bits_to_f32(sb[(n * rows + r) * G + (k >> 5)]), wf);
#pragma unroll
      for (int j = 0; j < 16; ++j) acc[n] = fmaf(wf[j], xv[j], acc[n]);
    }
  }
}

// EPI 0: y[f] = v; 1: y[f] += v (residual); 2: y[f] = SwiGLU(gate, up). bf16 rounding as linear.cu.
// The block's rows of `m` from shared memory `wb` (waited for on `bar`), input xs.
template <int NW, int EPI, bool BF16, int QF>
__device__ void gemv_rows(const Mat& m, const float* xs, const uint16_t* wb, uint64_t* bar, unsigned parity, float* y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t r0 = blockIdx.x * m.F / gridDim.x, rows = (blockIdx.x + 1) * m.F / gridDim.x - r0;
  const int C = static_cast<int>(m.K / 256);
  mbar_wait(bar, parity);
  for (int64_t r = warp; r < rows; r += kWarps) {
    // The residual's old value (final for this phase) is fetched while the dot product runs.
    const float old = EPI == 1 && lane == 0 ? __ldcg(y + r0 + r) : 0.0f;
    float acc[NW];
#pragma unroll
    for (int n = 0; n < NW; ++n) acc[n] = 0.0f;
    if constexpr (QF != 0) {
      quant_row_dots<NW, QF>(m, xs, wb, rows, r, acc);
    } else {
#pragma unroll 4
      for (int i = 0; i < C; ++i) {
        const int k = lane * 8 + 256 * i;
        const float4 a = *reinterpret_cast<const float4*>(xs + k);
        const float4 b = *reinterpret_cast<const float4*>(xs + k + 4);
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int n = 0; n < NW; ++n) {
          float wf[8];
          dev::unpack8(*reinterpret_cast<const uint4*>(wb + (n * rows + r) * m.K + k), wf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[n] = fmaf(wf[j], xv[j], acc[n]);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < NW; ++n) acc[n] = dev::warp_sum(acc[n]);
    if (lane != 0) continue;
    const int64_t f = r0 + r;
    if constexpr (EPI == 2) {
      // + 0.0f as linear.cu's absent bias does (it turns −0 into +0).
      const float g = acc[0] + 0.0f, u = acc[1] + 0.0f;
      y[f] = BF16 ? dev::swiglu_bf16(g, u) : __fmul_rn(__fmul_rn(g, dev::sigmoid_f32(g)), u);
    } else if constexpr (EPI == 1) {
      y[f] = BF16 ? dev::round_bf16(old + dev::round_bf16(acc[0])) : old + acc[0];
    } else {
      y[f] = BF16 ? dev::round_bf16(acc[0]) : acc[0];
    }
  }
}

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

constexpr int kPhasesPerLayer = 5;  // qkv, attention, o, gate/up, down

// Diagnostics: thread 0 stamps %globaltimer at point k (0 phase start, 1 input staged, 2 arrival).
__device__ __forceinline__ void stamp(const DecodeStackArgs& a, int phase, int k) {
  if (a.trace == nullptr || threadIdx.x != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  a.trace[(static_cast<int64_t>(phase) * gridDim.x + blockIdx.x) * 3 + k] = t;
}

// All blocks of the grid meet here after `phase`; writes before it are visible to every block after it.
// barrier[0] counts arrivals over the whole launch (barrier k of the launch waits for k·blocks), so
// an arrival is one release-add and the wait one acquire poll, with no reset between barriers;
// barrier[1] counts the blocks that finished, and the last one zeroes both for the next launch.
// `then` runs on thread 32 once the barrier has opened (it issues weight copies): issued before
// the arrival they delay it by 1–3 µs, and beside it they slow the barrier's polls (measured).
template <class Then>
__device__ __forceinline__ void grid_sync(const DecodeStackArgs& a, unsigned& target, int phase, Then then) {
  target += gridDim.x;
  __syncthreads();
  stamp(a, phase, 2);
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(a.barrier) : "memory");
    while (load_acquire(a.barrier) < target) {
    }
  }
  stamp(a, phase + 1, 0);
  __syncthreads();
  if (threadIdx.x == 32) then();
}

// The non-attending blocks' gate/up copy waits this long after the qkv barrier, so the attending
// blocks' reads of the new q/k/v row (the attention's first, L2-bound step) do not queue behind
// it. On the H200 1 µs made the 0.6B 2 % faster, 3 µs nothing, and issuing after the attention
// (the copy then delays the o phase) 1 % slower.
constexpr unsigned long long kGateUpDelayNs = 1000;
__device__ __forceinline__ void wait_ns(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

__device__ void grid_exit(const DecodeStackArgs& a, int phase) {
  __syncthreads();
  stamp(a, phase, 2);
  if (threadIdx.x == 0 && atomicAdd(a.barrier + 1, 1u) == gridDim.x - 1) {
    a.barrier[0] = 0;
    a.barrier[1] = 0;
  }
}

// Small contexts (the code predictor's ≤ 17 positions): the block that attends for head h gets the
// head's cached keys and values of the earlier positions, its QK-norm weights and the rope
// frequencies in shared memory by bulk copies issued a phase ahead, so after the barrier only the
// new q/k/v row comes from L2 (each dependent L2 read there cost ~0.6 µs, measured).
constexpr int kPreKeys = 32;

// Layer `layer`'s cached keys (or values) of sequence `seq` at columns col.. (a kv head's).
// PAGED: the kernel instantiated for paged caches (a.kv_pages set).
template <bool PAGED>
__device__ __forceinline__ dev::KvRows layer_rows(const DecodeStackArgs& a, int layer, int seq, int64_t col,
                                                  bool values) {
  const int64_t step = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const int64_t off = (2 * static_cast<int64_t>(layer) + (values ? 1 : 0)) * a.kv_layer_floats + col;
  if constexpr (PAGED) {
    const int64_t table = a.kv_capacity >> a.kv_page_shift;
    return dev::paged_rows(a.kv_pages + seq * table, table, off, step, a.kv_page_shift);
  } else {
    dev::KvRows r;
    r.step = step;
    r.base = a.kv_base + off + seq * a.kv_seq_stride;
    return r;
  }
}
struct AttnPreload {
  float *keys, *values, *q_norm, *k_norm, *inv_freq;  // [kPreKeys][D] ×2, [D] ×2, [D/2]
};
__host__ __device__ inline int64_t preload_floats(int64_t D) { return 2 * kPreKeys * D + 2 * D + D / 2; }
__device__ inline AttnPreload preload_layout(float* p, int D) {
  return {p, p + kPreKeys * D, p + 2 * kPreKeys * D, p + 2 * kPreKeys * D + D, p + 2 * kPreKeys * D + 2 * D};
}
__device__ inline bool preloads(const DecodeStackArgs& a, int pos) {
  return a.q_heads <= static_cast<int>(gridDim.x) && static_cast<int>(blockIdx.x) < a.q_heads && pos >= 0 &&
         pos <= kPreKeys && pos < a.kv_capacity;
}

// Thread 32, after a block barrier that ended every read of the preload region.
template <bool PAGED>
__device__ void issue_preload(const DecodeStackArgs& a, const StackLayerWeights& L, int layer, int seq,
                                           int pos, const AttnPreload& p, uint64_t* bar) {
  const int D = a.head_dim, g = static_cast<int>(blockIdx.x) / (a.q_heads / a.kv_heads);
  const int64_t row = D * sizeof(float);
  const dev::KvRows kb = layer_rows<PAGED>(a, layer, seq, static_cast<int64_t>(g) * D, false);
  const dev::KvRows vb = layer_rows<PAGED>(a, layer, seq, static_cast<int64_t>(g) * D, true);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const int64_t bytes = 2 * pos * row + (L.q_norm ? 2 * row : 0) + row / 2;
  mbar_expect_bytes(bar, bytes);
  for (int j = 0; j < pos; ++j) {
    bulk_copy(p.keys + j * D, dev::kv_row<PAGED>(kb, j), row, bar);
    bulk_copy(p.values + j * D, dev::kv_row<PAGED>(vb, j), row, bar);
  }
  if (L.q_norm) {
    bulk_copy(p.q_norm, L.q_norm, row, bar);
    bulk_copy(p.k_norm, L.k_norm, row, bar);
  }
  bulk_copy(p.inv_freq, a.inv_freq, row / 2, bar);
}

// Long contexts (not preloaded): this block's share of layer `layer`'s cached keys and values of
// the earlier positions into L2, two phases before its attention reads them. Thread 32.
template <bool PAGED>
__device__ void prefetch_layer_kv(const DecodeStackArgs& a, int layer, int seq, int pos) {
  const int64_t earlier = min(static_cast<int64_t>(pos), a.kv_capacity);
  if (earlier <= 0) return;
  const int64_t row = static_cast<int64_t>(a.kv_heads) * a.head_dim;
  const dev::KvRows k = layer_rows<PAGED>(a, layer, seq, 0, false);
  if constexpr (PAGED)
    dev::prefetch_kv_pages_l2(k.pages, k.off, k.off + a.kv_layer_floats, k.shift, earlier, row,
                              static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
  else
    dev::prefetch_kv_l2(k.base, k.base + a.kv_layer_floats, earlier * row, static_cast<int>(blockIdx.x),
                        static_cast<int>(gridDim.x));
}

// Query head h of the row against keys 0..pos: the fused decode-attention kernel's steps
// (attend_head.cuh) with as many warps as it would use; the other warps only meet the block
// barriers. `pre`: this head's preloaded keys/values/norms (complete), or null to read them from
// global memory.
template <bool BF16, bool PAGED>
__device__ void attend_head(const DecodeStackArgs& a, const StackLayerWeights& L, int layer, int h, int seq, int pos,
                            const AttnPreload* pre, float* sm) {
  const int Hq = a.q_heads, Hkv = a.kv_heads, D = a.head_dim;
  const int warps = dev::attention_warps(a.kv_capacity);
  const bool active = (threadIdx.x >> 5) < warps;
  const int n = min(pos + 1, static_cast<int>(a.kv_capacity));
  float* o = a.attn + static_cast<int64_t>(h) * D;
  if (n <= 0) {
    for (int d = threadIdx.x; d < D; d += kThreads) o[d] = 0.0f;
    return;
  }
  const dev::HeadScratch w = dev::head_scratch(sm, D, n);
  float *qs = w.q, *knew = w.knew, *vnew = w.vnew, *sc = w.scores, *part = w.part;
  const int g = h / (Hq / Hkv);
  const dev::KvRows kcache = layer_rows<PAGED>(a, layer, seq, static_cast<int64_t>(g) * D, false);
  const dev::KvRows vcache = layer_rows<PAGED>(a, layer, seq, static_cast<int64_t>(g) * D, true);
  const bool store = h % (Hq / Hkv) == 0 && pos < a.kv_capacity;
  dev::head_new_row(a.qkv, h, g, Hq, Hkv, D, pre && L.q_norm ? pre->q_norm : L.q_norm,
                    pre && L.k_norm ? pre->k_norm : L.k_norm, a.eps, pre ? pre->inv_freq : a.inv_freq, pos, BF16, qs,
                    knew, vnew, store, store ? dev::kv_row<PAGED>(kcache, pos) : nullptr,
                    store ? dev::kv_row<PAGED>(vcache, pos) : nullptr);
  __syncthreads();
  // Earlier positions' keys and values: from shared memory (preloaded, contiguous rows) or the cache.
  const auto attend = [&](const dev::KvRows& kb, const dev::KvRows& vb, auto paged) {
    constexpr bool kPaged = decltype(paged)::value;
    if (active) dev::head_scores<true, dev::kKeysPerWarp, kPaged>(qs, kb, knew, pos, n, warps, D, a.scale, BF16, sc);
    __syncthreads();
    if (active) dev::head_values<4, kPaged>(sc, n, vb, vnew, pos, warps, D, BF16, part);
  };
  if constexpr (PAGED) {
    if (pre) attend(dev::contiguous_rows(pre->keys, D), dev::contiguous_rows(pre->values, D), std::false_type{});
    else attend(kcache, vcache, std::true_type{});
  } else {
    attend(pre ? dev::contiguous_rows(pre->keys, D) : kcache, pre ? dev::contiguous_rows(pre->values, D) : vcache,
           std::false_type{});
  }
  __syncthreads();
  dev::head_output(part, warps, D, kThreads, BF16, o);
  __syncthreads();  // the shared scratch is reused by the next head or phase
}

template <bool BF16, int QF, bool PAGED>
__global__ void __launch_bounds__(kThreads, 1) decode_stack_kernel(DecodeStackArgs a) {
  extern __shared__ __align__(16) float sm[];
  if (a.n_layers <= 0) return;  // the launch probe of decode_stack_reserve
  const int64_t H = a.hidden, D = a.head_dim, qw = a.q_heads * D, kvw = a.kv_heads * D, I = a.intermediate;
  auto qkv_mat = [&](const StackLayerWeights& L) {
    return Mat{{L.q, L.k, L.v}, qw, kvw, qw + 2 * kvw, H, {L.codes[0], L.codes[1], L.codes[2]},
               {L.scales[0], L.scales[1], L.scales[2]}};
  };
  auto o_mat = [&](const StackLayerWeights& L) {
    return Mat{{L.o, nullptr, nullptr}, H, 0, H, qw, {L.codes[3], nullptr, nullptr}, {L.scales[3], nullptr, nullptr}};
  };
  auto gu_mat = [&](const StackLayerWeights& L) {
    return Mat{{L.gate, L.up, nullptr}, I, 0, I, H, {L.codes[4], L.codes[5], nullptr}, {L.scales[4], L.scales[5], nullptr}};
  };
  auto down_mat = [&](const StackLayerWeights& L) {
    return Mat{{L.down, nullptr, nullptr}, H, 0, H, I, {L.codes[6], nullptr, nullptr}, {L.scales[6], nullptr, nullptr}};
  };

  // Shared memory: the two weight buffers, then the staged input / attention scratch.
  const WeightBuffers wbuf = weight_buffers(H, qw + 2 * kvw, qw, I, gridDim.x, QF != 0);
  uint16_t* buf0 = reinterpret_cast<uint16_t*>(sm);
  uint16_t* buf1 = buf0 + wbuf.bytes[0] / 2;
  const AttnPreload pre = preload_layout(reinterpret_cast<float*>(buf1 + wbuf.bytes[1] / 2), static_cast<int>(D));
  float* xs = pre.inv_freq + D / 2;  // 16-byte aligned: D is a multiple of 8
  // bars[0], bars[1]: the weight buffers; bars[2]: the attention preload (parity = layer & 1).
  __shared__ uint64_t bars[3];
  __shared__ float inv_s;
  const auto stage_in = [&](const float* x, int64_t K, const float* g) { stage<BF16>(x, K, g, a.eps, xs, &inv_s); };
  const auto none = [] {};
  if (threadIdx.x == 0) {
    for (uint64_t& b : bars) dev::mbar_init(&b, 1);
    dev::mbar_init_fence();
    issue_rows<1, QF>(qkv_mat(a.layers[0]), buf0, &bars[0]);
    issue_rows<1, QF>(o_mat(a.layers[0]), buf1, &bars[1]);
  }
  // Weights are constant, so their copies start before the wait for the previous kernel (PDL);
  // the row's position, input and caches come after it.
  dev::pdl_wait();
  const int seq = a.seq[0], pos = a.pos[0];
  const bool preload = preloads(a, pos);
  if (threadIdx.x == 0 && preload) issue_preload<PAGED>(a, a.layers[0], 0, seq, pos, pre, &bars[2]);
  if (threadIdx.x == 32 && !preload) prefetch_layer_kv<PAGED>(a, 0, seq, pos);
  __syncthreads();
  // Each buffer alternates between two phase kinds, so a kind's wait parity is fixed: qkv and o
  // are the even uses of their buffers, gate/up and down the odd ones.
  unsigned target = 0;
  stamp(a, 0, 0);
  // The o, down and qkv copies are issued after the staging of the phase before the one that reads
  // them, not at the barrier, so staging's L2 reads do not queue behind them (measured faster). The
  // gate/up copy: blocks that attend issue it after the o phase's staging (at the barrier it would
  // queue ahead of their attention's L2 reads, right after the attention ahead of the staging); the
  // others kGateUpDelayNs after the qkv barrier.
  const bool issuer = threadIdx.x == 32;
  const bool attends = static_cast<int>(blockIdx.x) < a.q_heads;
  for (int l = 0; l < a.n_layers; ++l) {
    const StackLayerWeights& L = a.layers[l];
    const bool more = l + 1 < a.n_layers;
    const int ph = l * kPhasesPerLayer;
    stage_in(a.h, H, L.in_norm);
    if (issuer && l > 0) issue_rows<1, QF>(o_mat(L), buf1, &bars[1]);
    stamp(a, ph, 1);
    gemv_rows<1, 0, BF16, QF>(qkv_mat(L), xs, buf0, &bars[0], 0, a.qkv);
    grid_sync(a, target, ph, [&] {
      if (!attends) {
        wait_ns(kGateUpDelayNs);
        issue_rows<2, QF>(gu_mat(L), buf0, &bars[0]);
      }
    });

    stamp(a, ph + 1, 1);
    if (preload) mbar_wait(&bars[2], l & 1);
    for (int h = blockIdx.x; h < a.q_heads; h += gridDim.x)
      attend_head<BF16, PAGED>(a, L, l, h, seq, pos, preload ? &pre : nullptr, xs);
    grid_sync(a, target, ph + 1, none);

    stage_in(a.attn, qw, nullptr);
    if (issuer && attends) issue_rows<2, QF>(gu_mat(L), buf0, &bars[0]);
    stamp(a, ph + 2, 1);
    gemv_rows<1, 1, BF16, QF>(o_mat(L), xs, buf1, &bars[1], 0, a.h);
    grid_sync(a, target, ph + 2, none);

    stage_in(a.h, H, L.post_norm);
    if (issuer) issue_rows<1, QF>(down_mat(L), buf1, &bars[1]);
    stamp(a, ph + 3, 1);
    gemv_rows<2, 2, BF16, QF>(gu_mat(L), xs, buf0, &bars[0], 1, a.mlp);
    grid_sync(a, target, ph + 3, [&] {
      if (more && !preload) prefetch_layer_kv<PAGED>(a, l + 1, seq, pos);
    });

    stage_in(a.mlp, I, nullptr);
    if (issuer && more) issue_rows<1, QF>(qkv_mat(a.layers[l + 1]), buf0, &bars[0]);
    stamp(a, ph + 4, 1);
    gemv_rows<1, 1, BF16, QF>(down_mat(L), xs, buf1, &bars[1], 1, a.h);
    if (more)
      grid_sync(a, target, ph + 4, [&] {
        if (preload) issue_preload<PAGED>(a, a.layers[l + 1], l + 1, seq, pos, pre, &bars[2]);
      });
  }
  grid_exit(a, a.n_layers * kPhasesPerLayer - 1);
}

struct Launch {
  bool ok = false;
  bool quant = false;  // the int8 / fp8 kernels fit too
  bool pdl = false;  // the cooperative launch also takes programmatic stream serialization
  int blocks = 0;
  int max_smem = 0;
};
Launch g_launch;
std::once_flag g_once;

// A cooperative launch (all blocks resident, for the grid barriers), with programmatic dependent
// launch when `pdl`.
struct StackLaunchConfig {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  StackLaunchConfig(int blocks, size_t smem, cudaStream_t s, bool pdl) {
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2 : 1;
  }
};

// Dynamic shared memory: the weight buffers, then the staged input or the attention scratch.
int64_t smem_bytes(const DecodeStackArgs& a) {
  const int64_t D = a.head_dim, qw = a.q_heads * D;
  const int64_t stage_in = std::max<int64_t>({a.hidden, qw, a.intermediate});
  const int64_t attn = dev::head_scratch_floats(D, a.kv_capacity, kWarps);
  const WeightBuffers w = weight_buffers(a.hidden, qw + 2 * a.kv_heads * D, qw, a.intermediate, g_launch.blocks,
                                         a.weights != cpu::WeightFormat::kBf16);
  return w.bytes[0] + w.bytes[1] + (preload_floats(D) + std::max(stage_in, attn)) * static_cast<int64_t>(sizeof(float));
}

// Off only in tests (decode_stack_set_enabled), which compare the kernel-by-kernel path with it.
std::atomic<bool> g_enabled{true};
std::atomic<uint64_t> g_launches{0};

using StackKernel = void (*)(DecodeStackArgs);
template <int QF>
StackKernel stack_kernel_q(bool bf16, bool paged) {
  if (paged) return bf16 ? decode_stack_kernel<true, QF, true> : decode_stack_kernel<false, QF, true>;
  return bf16 ? decode_stack_kernel<true, QF, false> : decode_stack_kernel<false, QF, false>;
}

// `paged`: the instantiation that reads K/V through a page table (a.kv_pages set).
StackKernel stack_kernel(bool bf16, cpu::WeightFormat w, bool paged) {
  switch (dev::quant_kind(w)) {
    case dev::kQInt8: return stack_kernel_q<dev::kQInt8>(bf16, paged);
    case dev::kQFp8: return stack_kernel_q<dev::kQFp8>(bf16, paged);
    default: return stack_kernel_q<0>(bf16, paged);
  }
}

// Gives `k` the dynamic shared memory limit; false when it cannot run one block per SM with it.
bool reserve_kernel(StackKernel k, int max_smem) {
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, static_cast<size_t>(max_smem)) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return false;
  }
  return true;
}

// With decode_stack_enable_trace: stamps of the last launch per stack depth (up to kTraceSlots
// depths of at most kTraceLayers layers), in buffers made by decode_stack_reserve, outside graph
// capture.
constexpr int kTraceSlots = 4, kTraceLayers = 64;
struct TraceSlot {
  int layers = 0;
  DeviceBuffer stamps;
};
TraceSlot g_trace[kTraceSlots];
std::mutex g_trace_mutex;
std::atomic<bool> g_trace_requested{false};

bool trace_requested() { return g_trace_requested.load(std::memory_order_relaxed); }

size_t trace_words() { return static_cast<size_t>(kTraceLayers) * kPhasesPerLayer * g_launch.blocks * 3; }

unsigned long long* trace_buffer(int layers) {
  std::lock_guard<std::mutex> lock(g_trace_mutex);
  if (layers > kTraceLayers) return nullptr;
  for (TraceSlot& t : g_trace) {
    if (t.stamps.data() == nullptr) return nullptr;
    if (t.layers == 0) t.layers = layers;
    if (t.layers == layers) return t.stamps.as<unsigned long long>();
  }
  return nullptr;
}

// Mean over layers of each phase kind's times (µs): from the previous phase's last arrival to this
// one's (total), to each block seeing the barrier open (barrier), staging, and the matrix work.
std::string trace_summary(int layers, int blocks, const std::vector<unsigned long long>& st) {
  static const char* kNames[kPhasesPerLayer] = {"qkv", "attention", "o", "gate/up", "down"};
  auto at = [&](int phase, int b, int k) { return static_cast<double>(st[(static_cast<size_t>(phase) * blocks + b) * 3 + k]); };
  auto last_arrival = [&](int phase) {
    double m = 0;
    for (int b = 0; b < blocks; ++b) m = std::max(m, at(phase, b, 2));
    return m;
  };
  double sum[kPhasesPerLayer][5] = {};
  int n[kPhasesPerLayer] = {};
  const int phases = layers * kPhasesPerLayer;
  for (int ph = 1; ph < phases; ++ph) {
    const int kind = ph % kPhasesPerLayer;
    const double prev = last_arrival(ph - 1), last = last_arrival(ph);
    double barrier = 0, stage = 0, work = 0, work_max = 0;
    for (int b = 0; b < blocks; ++b) {
      barrier += at(ph, b, 0) - prev;
      stage += at(ph, b, 1) - at(ph, b, 0);
      work += at(ph, b, 2) - at(ph, b, 1);
      work_max = std::max(work_max, at(ph, b, 2) - at(ph, b, 1));
    }
    const double v[5] = {last - prev, barrier / blocks, stage / blocks, work / blocks, work_max};
    for (int i = 0; i < 5; ++i) sum[kind][i] += v[i] / 1000.0;
    ++n[kind];
  }
  char line[200];
  std::snprintf(line, sizeof line, "decode_stack trace, %d layers, %d blocks: launch span %.1f us\n", layers, blocks,
                (last_arrival(phases - 1) - at(0, 0, 0)) / 1000.0);
  std::string out = line;
  out += "  phase      total  barrier  stage  work(mean)  work(max)  [us, mean over layers]\n";
  for (int k = 0; k < kPhasesPerLayer; ++k) {
    if (n[k] == 0) continue;
    std::snprintf(line, sizeof line, "  %-9s %6.2f %8.2f %6.2f %11.2f %10.2f\n", kNames[k], sum[k][0] / n[k],
                  sum[k][1] / n[k], sum[k][2] / n[k], sum[k][3] / n[k], sum[k][4] / n[k]);
    out += line;
  }
  return out;
}

}  // namespace

std::string decode_stack_trace_report() {
  std::lock_guard<std::mutex> lock(g_trace_mutex);
  std::string out;
  if (cudaDeviceSynchronize() != cudaSuccess) return "decode_stack trace: device error\n";
  for (const TraceSlot& t : g_trace) {
    if (t.layers == 0) continue;
    std::vector<unsigned long long> st(trace_words());
    if (cudaMemcpy(st.data(), t.stamps.data(), st.size() * sizeof(st[0]), cudaMemcpyDeviceToHost) != cudaSuccess)
      return out + "decode_stack trace: copy failed\n";
    out += trace_summary(t.layers, g_launch.blocks, st);
  }
  return out;
}

bool decode_stack_reserve() {
  std::call_once(g_once, [] {
    int dev = 0, sms = 0, optin = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || !coop)
      return;
    const int max_smem = optin - 1024;  // the kernel's static shared memory comes on top
    for (const bool paged : {false, true})
      for (const bool bf16 : {false, true})
        if (!reserve_kernel(stack_kernel(bf16, cpu::WeightFormat::kBf16, paged), max_smem)) return;
    bool quant = true;
    for (const auto w : {cpu::WeightFormat::kInt8, cpu::WeightFormat::kFp8})
      for (const bool paged : {false, true})
        for (const bool bf16 : {false, true}) quant = quant && reserve_kernel(stack_kernel(bf16, w, paged), max_smem);
    g_launch.blocks = sms;
    g_launch.max_smem = max_smem;
    g_launch.ok = true;
    g_launch.quant = quant;
    // Whether this driver takes a cooperative launch with PDL: one empty launch (n_layers = 0),
    // here, outside any graph capture, where a refusal cannot break a capture.
    {
      StackLaunchConfig probe(sms, 0, nullptr, true);
      const bool launched =
          cudaLaunchKernelEx(&probe.cfg, stack_kernel(false, cpu::WeightFormat::kBf16, false), DecodeStackArgs{}) ==
          cudaSuccess;
      g_launch.pdl = launched && cudaDeviceSynchronize() == cudaSuccess;
      cudaGetLastError();
    }
    if (trace_requested())
      for (TraceSlot& t : g_trace) {
        auto buf = DeviceBuffer::alloc(trace_words() * sizeof(unsigned long long));
        if (!buf.ok()) break;
        t.stamps = std::move(buf).value();
      }
  });
  return g_launch.ok;
}

bool decode_stack_applies(const DecodeStackArgs& a) {
  if (!g_enabled.load(std::memory_order_relaxed) || !g_launch.ok) return false;
  if (a.weights != cpu::WeightFormat::kBf16 && (!g_launch.quant || dev::quant_kind(a.weights) == 0)) return false;
  const int64_t D = a.head_dim;
  if (a.n_layers <= 0 || a.hidden <= 0 || a.q_heads <= 0 || a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0 ||
      D <= 0 || D % 8 != 0 || D > 32 * dev::kHeadChunks)
    return false;
  if (a.hidden % 256 != 0 || (a.q_heads * D) % 256 != 0 || a.intermediate <= 0 || a.intermediate % 256 != 0)
    return false;
  // Staged inputs are read as float4.
  for (const void* p : {static_cast<const void*>(a.h), static_cast<const void*>(a.attn), static_cast<const void*>(a.mlp)})
    if (!aligned16(p)) return false;
  return smem_bytes(a) <= g_launch.max_smem;
}

Status decode_stack(const DecodeStackArgs& a, cudaStream_t s) {
  if (!decode_stack_applies(a)) return make_error(ErrorCode::kUnsupported, "decode_stack: shape not supported");
  StackLaunchConfig lc(g_launch.blocks, static_cast<size_t>(smem_bytes(a)), s, g_launch.pdl);
  cudaLaunchConfig_t& cfg = lc.cfg;
  DecodeStackArgs args = a;
  if (trace_requested()) args.trace = trace_buffer(a.n_layers);
  CHORUS_CUDA_TRY(cudaLaunchKernelEx(&cfg, stack_kernel(a.bf16, a.weights, a.kv_pages != nullptr), args));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return ok_status();
}

void decode_stack_set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void decode_stack_enable_trace() { g_trace_requested.store(true, std::memory_order_relaxed); }

uint64_t decode_stack_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace chorus::cuda
