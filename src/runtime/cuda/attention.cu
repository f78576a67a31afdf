// Attention over a device KV cache: QK-norm + rotary embedding + cache store of the new rows, then
// causal grouped-query attention per (row, query head).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>

#include "runtime/cuda/attend_head.cuh"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/head_norm_rope.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kNormWarps = 4;

// Sequence seq's key (or value) rows of one layer at columns col.. (a kv head), contiguous or paged
// (kv.pages set; the kernels that read paged caches are instantiated apart).
template <bool PAGED>
__device__ __forceinline__ dev::KvRows kv_rows(const KvLayer& kv, bool values, int64_t seq, int64_t col,
                                               int64_t step) {
  if constexpr (PAGED) {
    const int64_t table = kv.capacity >> kv.page_shift;
    return dev::paged_rows(kv.pages + seq * table, table, (values ? kv.v_page : kv.k_page) + col, step, kv.page_shift);
  } else {
    dev::KvRows r;
    r.step = step;
    r.base = (values ? kv.v : kv.k) + seq * kv.seq_stride + col;
    return r;
  }
}
// The row of (seq, pos), either way (a kernel that stores one row per call).
__device__ __forceinline__ float* kv_row_any(const KvLayer& kv, bool values, int64_t seq, int pos, int64_t col,
                                             int64_t step) {
  return kv.pages ? dev::kv_row<true>(kv_rows<true>(kv, values, seq, col, step), pos)
                  : dev::kv_row<false>(kv_rows<false>(kv, values, seq, col, step), pos);
}

// grid (ceil((Hq + Hkv) / kNormWarps), rows): one warp per head (query heads, then kv heads).
__global__ void qk_norm_rope_store_kernel(const float* qkv, int64_t ld, int Hq, int Hkv, int D, const float* qn,
                                          const float* kn, float eps, const float* inv_freq, const int32_t* seqs,
                                          const int32_t* poss, KvLayer kv, float* q_out, bool bf16) {
  extern __shared__ float smem[];
  dev::pdl_wait();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int job = blockIdx.x * kNormWarps + warp;
  if (job >= Hq + Hkv) return;
  float* buf = smem + warp * D;
  const int64_t r = blockIdx.y;
  const int pos = poss[r];
  const int64_t seq = seqs[r];
  const float* row = qkv + r * ld;
  const int64_t kvw = static_cast<int64_t>(Hkv) * D;
  const bool is_q = job < Hq;
  const int g = job - Hq;
  if (!is_q && !(pos >= 0 && pos < kv.capacity)) return;
  const float* src = is_q ? row + static_cast<int64_t>(job) * D : row + static_cast<int64_t>(Hq) * D + static_cast<int64_t>(g) * D;
  for (int d = lane; d < D; d += 32) buf[d] = src[d];
  __syncwarp();
  if (is_q) {
    dev::norm_rope_head(buf, D, qn, eps, inv_freq, pos, q_out + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(job) * D,
                   bf16);
  } else {
    float* kdst = kv_row_any(kv, false, seq, pos, static_cast<int64_t>(g) * D, kvw);
    float* vdst = kv_row_any(kv, true, seq, pos, static_cast<int64_t>(g) * D, kvw);
    dev::norm_rope_head(buf, D, kn, eps, inv_freq, pos, kdst, bf16);
    const float* vsrc = row + static_cast<int64_t>(Hq + Hkv) * D + static_cast<int64_t>(g) * D;
    for (int d = lane; d < D; d += 32) vdst[d] = vsrc[d];
  }
}

constexpr int kAttnMaxThreads = 512;

// Long contexts get more warps (more keys in flight); the code predictor's 16 positions need few.
int attention_threads(int64_t capacity) { return 32 * dev::attention_warps(capacity); }
static_assert(32 * 16 == kAttnMaxThreads);

struct AttnParams {
  const float* q;    // unfused: rows' query heads [rows, Hq·D], already normed and rotated
  const float* qkv;  // fused: the raw projections [q | k | v] of each row, stride ld
  int64_t ld;
  const float* qn;
  const float* kn;
  float eps;
  const float* inv_freq;
  int Hq, Hkv, D;
  float scale;
  const int32_t* seqs;
  const int32_t* poss;
  KvLayer kv;
  float* out;
  bool bf16;  // eager attention under bf16: scores, probabilities and outputs rounded (nn::bf16::attention)
};

// Small caches (Breeze's depth decoder: 16 positions): the fused kernel copies its kv group's
// earlier keys and values into shared memory before it waits for the previous kernel, so after the
// wait only the new q/k/v row is read from L2 (as the persistent stack's preload).
constexpr int kPreloadKeys = 32;

__host__ __device__ inline bool preloads(int64_t capacity, int64_t D) { return capacity <= kPreloadKeys && D % 4 == 0; }

// The preloaded keys' offset in the dynamic shared memory (16-byte aligned), and the floats after it.
__host__ __device__ inline int64_t preload_offset(int64_t D, int64_t capacity) {
  return (dev::head_scratch_floats(D, capacity, dev::attention_warps(capacity)) + 3) & ~int64_t{3};
}

// Rows 0..earlier−1 of one kv head's keys and values (row stride `stride` floats) → keys, values
// [earlier][D], through L2 (written by earlier kernels). All threads of the block.
__device__ inline void preload_rows(const float* k, const float* v, int64_t stride, int earlier, int D, float* keys,
                                    float* values) {
  const int per_row = D / 4;
  for (int i = threadIdx.x; i < earlier * per_row; i += blockDim.x) {
    const int j = i / per_row, d = 4 * (i % per_row);
    *reinterpret_cast<float4*>(keys + j * D + d) = __ldcg(reinterpret_cast<const float4*>(k + j * stride + d));
    *reinterpret_cast<float4*>(values + j * D + d) = __ldcg(reinterpret_cast<const float4*>(v + j * stride + d));
  }
}

// While the previous kernel runs (thread 0 of each block, before the PDL wait): the block's share of
// row r's earlier keys and values, every kv head, into L2. The position read before the wait is a
// hint; the caches are only read after it.
template <bool PAGED>
__device__ inline void prefetch_earlier_kv(const AttnParams& a, int64_t r, int hint) {
  if (threadIdx.x != 0) return;
  const int64_t seq = a.seqs[r];
  const int64_t earlier = min(static_cast<int64_t>(hint), a.kv.capacity);
  if (earlier <= 0 || seq < 0) return;
  const int64_t row = static_cast<int64_t>(a.Hkv) * a.D;
  if constexpr (PAGED)
    dev::prefetch_kv_pages_l2(a.kv.pages + seq * (a.kv.capacity >> a.kv.page_shift), a.kv.k_page, a.kv.v_page,
                              a.kv.page_shift, earlier, row, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
  else
    dev::prefetch_kv_l2(a.kv.k + seq * a.kv.seq_stride, a.kv.v + seq * a.kv.seq_stride, earlier * row,
                        static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// grid (q heads, rows). Shared: q, new key, new value [D each], scores [n], per-warp partial
// outputs [warps, D]. FUSED (decode: one new row per sequence): the block norms and rotates its own
// query head and its kv head's new key itself, takes the new key and value from shared memory,
// and the first query head of each kv group stores them into the cache for later steps.
// PRELOAD (FUSED, caches that preloads() takes) is a separate instantiation: as a branch, its extra
// code slows the attention over long caches (1.7B talker) by ~1 %.
template <bool FUSED, bool PRELOAD = false, bool PAGED = false>
__global__ void __launch_bounds__(kAttnMaxThreads) attention_kernel(AttnParams a) {
  static_assert(!(PRELOAD && PAGED), "the preload reads contiguous rows");
  extern __shared__ float smem[];
  const int Hq = a.Hq, Hkv = a.Hkv, D = a.D;
  const int h = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int group = Hq / Hkv, g = h / group;
  // The position read before the wait: what is preloaded and where the rotation is formed. The block
  // uses them only if the position read after the wait is the same (a kernel just before could
  // have moved it).
  const int hint = FUSED ? a.poss[r] : 0;
  int preloaded_pos = -1;
  if (PRELOAD) {
    const int64_t seq = a.seqs[r];
    const int earlier = min(hint, static_cast<int>(a.kv.capacity));
    if (seq >= 0 && hint >= 0) {
      const int64_t kstride = static_cast<int64_t>(Hkv) * D;
      const int64_t base = seq * a.kv.seq_stride + static_cast<int64_t>(g) * D;
      float* keys = smem + preload_offset(D, a.kv.capacity);
      preload_rows(a.kv.k + base, a.kv.v + base, kstride, earlier, D, keys, keys + a.kv.capacity * D);
      preloaded_pos = hint;
    }
  }
  if (FUSED && a.kv.capacity > dev::kSmallContext) prefetch_earlier_kv<PAGED>(a, r, hint);
  dev::HeadRowConsts hc{};
  if (FUSED) hc = dev::head_new_row_consts(a.qn, a.kn, a.inv_freq, D, hint);
  dev::pdl_wait();
  const KvLayer& kv = a.kv;
  const int warps = blockDim.x >> 5;
  const int pos = a.poss[r];
  const int64_t seq = a.seqs[r];
  float x[dev::kHeadChunks];  // the new row's values, loaded together with the position
  if (FUSED) dev::head_new_row_load(a.qkv + r * a.ld, h, g, Hq, Hkv, D, x);
  const int n = min(pos + 1, static_cast<int>(kv.capacity));
  float* o = a.out + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(h) * D;
  if (n <= 0) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) o[d] = 0.0f;
    return;
  }
  const dev::HeadScratch w = dev::head_scratch(smem, D, n);
  float *qs = w.q, *knew = w.knew, *vnew = w.vnew, *sc = w.scores, *part = w.part;
  const int64_t kstride = static_cast<int64_t>(Hkv) * D;
  const dev::KvRows kb = kv_rows<PAGED>(kv, false, seq, static_cast<int64_t>(g) * D, kstride);
  const dev::KvRows vb = kv_rows<PAGED>(kv, true, seq, static_cast<int64_t>(g) * D, kstride);
  if constexpr (FUSED) {
    const bool store = h % group == 0 && pos < kv.capacity;
    dev::head_new_row_finish(x, hc, a.qn != nullptr, a.kn != nullptr, D, a.eps, pos, a.bf16, qs, knew, vnew, store,
                             store ? dev::kv_row<PAGED>(kb, pos) : nullptr,
                             store ? dev::kv_row<PAGED>(vb, pos) : nullptr);
  } else {
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = a.q[r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(h) * D + d];
  }
  __syncthreads();
  const int new_pos = FUSED ? pos : -1;  // the fused kernel's new key and value are in shared memory
  // Earlier keys and values: preloaded [capacity][D] rows in shared memory, or the cache.
  const bool pre = PRELOAD && preloaded_pos == pos;
  const float* pre_keys = smem + preload_offset(D, kv.capacity);
  const dev::KvRows keys = pre ? dev::contiguous_rows(pre_keys, D) : kb;
  const dev::KvRows values = pre ? dev::contiguous_rows(pre_keys + kv.capacity * D, D) : vb;
  dev::head_scores<false, dev::kKeysPerWarp, PAGED>(qs, keys, knew, new_pos, n, warps, D, a.scale, a.bf16, sc);
  __syncthreads();
  dev::head_values<8, PAGED>(sc, n, values, vnew, new_pos, warps, D, a.bf16, part);
  __syncthreads();
  dev::head_output(part, warps, D, blockDim.x, a.bf16, o);
}

// The small-cache decode attention (preloads() shapes) with the head size, the warp count and the
// rounding mode fixed at compile time, and the earlier keys and values always in shared memory (a
// position that moved after the wait preloads again), so every read of them is a shared-memory load
// with 32-bit addressing. The steps are attention_kernel's, each key's and value's sums in the same
// order, so the result is bit-identical to it and to the persistent stack. Why: Nsight Compute shows
// the general kernel executing ~1300 instructions per warp for 16 positions at ~12 cycles each (one
// warp per scheduler), most of them 64-bit address arithmetic and generic loads.
constexpr int kSmallWarps = 4;

template <int D, bool BF16>
__global__ void __launch_bounds__(kSmallWarps * 32) attention_small_kernel(AttnParams a) {
  extern __shared__ float smem[];
  const int h = blockIdx.x, r = blockIdx.y;
  const int Hq = a.Hq, Hkv = a.Hkv, group = Hq / Hkv, g = h / group;
  const int cap = static_cast<int>(a.kv.capacity);
  const int kvw = Hkv * D;
  float* keys = smem + preload_offset(D, cap);
  float* values = keys + cap * D;
  auto preload = [&](int seq, int pos) {
    if (seq < 0 || pos < 0) return;
    const int64_t base = seq * a.kv.seq_stride + static_cast<int64_t>(g) * D;
    preload_rows(a.kv.k + base, a.kv.v + base, kvw, min(pos, cap), D, keys, values);
  };
  const int hint = a.poss[r];
  preload(a.seqs[r], hint);
  dev::HeadRowConsts hc = dev::head_new_row_consts(a.qn, a.kn, a.inv_freq, D, hint);
  dev::pdl_wait();
  const int pos = a.poss[r];
  const int64_t seq = a.seqs[r];
  float x[dev::kHeadChunks];  // the new row's values, loaded together with the position
  dev::head_new_row_load(a.qkv + static_cast<int64_t>(r) * a.ld, h, g, Hq, Hkv, D, x);
  const int n = min(pos + 1, cap);
  float* o = a.out + static_cast<int64_t>(r) * Hq * D + static_cast<int64_t>(h) * D;
  if (n <= 0 || seq < 0) {
    for (int d = threadIdx.x; d < D; d += kSmallWarps * 32) o[d] = 0.0f;
    return;
  }
  if (pos != hint) {  // another kernel moved the position after the preload: read the rows again
    __syncthreads();
    preload(static_cast<int>(seq), pos);
  }
  const dev::HeadScratch w = dev::head_scratch(smem, D, n);
  const int64_t off = seq * a.kv.seq_stride + static_cast<int64_t>(pos) * kvw + static_cast<int64_t>(g) * D;
  dev::head_new_row_finish(x, hc, a.qn != nullptr, a.kn != nullptr, D, a.eps, pos, BF16, w.q, w.knew, w.vnew,
                           h % group == 0 && pos < cap, a.kv.k + off, a.kv.v + off);
  __syncthreads();
  dev::head_scores<false, 4>(w.q, dev::contiguous_rows(keys, D), w.knew, pos, n, kSmallWarps, D, a.scale, BF16,
                             w.scores);
  __syncthreads();
  dev::head_values<8>(w.scores, n, dev::contiguous_rows(values, D), w.vnew, pos, kSmallWarps, D, BF16, w.part);
  __syncthreads();
  dev::head_output(w.part, kSmallWarps, D, kSmallWarps * 32, BF16, o);
}

// The decode attention over long caches (the backbones and talkers: more than kSmallContext
// positions, head size 128, 16 warps), over a cluster of SPLIT blocks per query head. One block
// would read all of its kv group's earlier keys and values through one SM, and at a few hundred
// positions that read is what grows with the context; here each block reads 1/SPLIT of them. The
// head size and the rounding mode are fixed at compile time, so the scores' loop over the head's
// dims unrolls: each warp reads 16 keys in one round trip instead of one per 32 dims.
// Block b of the cluster scores the chunks of 16 keys c ≡ b (mod SPLIT) and writes the scores into
// every block of the cluster; after the cluster barrier each block forms the softmax over all of
// them. The weighted value sums are 16 warp sets (keys j ≡ s mod 16, in j order): block b takes sets
// 16/SPLIT·b onwards, each set's dims split over SPLIT warps, and writes them into block 0, which
// adds the 16 in order. Every sum is formed in attention_kernel<true>'s order, so the result is
// bit-identical to it and to the persistent stack.
constexpr int kLongWarps = 16;
static_assert(kLongWarps * 32 == kAttnMaxThreads);
constexpr int kLongSplit = 2;  // blocks per query head

template <int D, bool BF16, int SPLIT, bool PAGED = false>
__global__ void __cluster_dims__(SPLIT, 1, 1) __launch_bounds__(kLongWarps * 32) attention_split_kernel(AttnParams a) {
  constexpr int kKeys = 16, kSets = kLongWarps / SPLIT, kChunks = D / 32 / SPLIT;
  static_assert(D % (32 * SPLIT) == 0 && kLongWarps % SPLIT == 0, "a set's dims split evenly over SPLIT warps");
  namespace cg = cooperative_groups;
  extern __shared__ float smem[];
  const cg::cluster_group cluster = cg::this_cluster();
  const int part = static_cast<int>(cluster.block_rank());
  const int h = blockIdx.x / SPLIT;
  const int64_t r = blockIdx.y;
  const int Hq = a.Hq, Hkv = a.Hkv, group = Hq / Hkv, g = h / group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hint = a.poss[r];
  prefetch_earlier_kv<PAGED>(a, r, hint);
  dev::HeadRowConsts hc = dev::head_new_row_consts(a.qn, a.kn, a.inv_freq, D, hint);
  dev::pdl_wait();
  const int pos = a.poss[r];
  const int64_t seq = a.seqs[r];
  float x[dev::kHeadChunks];
  dev::head_new_row_load(a.qkv + r * a.ld, h, g, Hq, Hkv, D, x);
  const int n = min(pos + 1, static_cast<int>(a.kv.capacity));
  float* o = a.out + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(h) * D;
  if (n <= 0) {  // every block of the cluster returns here, before any of them touches another's memory
    if (part == 0)
      for (int d = threadIdx.x; d < D; d += kLongWarps * 32) o[d] = 0.0f;
    return;
  }
  const dev::HeadScratch w = dev::head_scratch(smem, D, n);
  const int64_t kstride = static_cast<int64_t>(Hkv) * D;
  const dev::KvRows kb = kv_rows<PAGED>(a.kv, false, seq, static_cast<int64_t>(g) * D, kstride);
  const dev::KvRows vb = kv_rows<PAGED>(a.kv, true, seq, static_cast<int64_t>(g) * D, kstride);
  const bool store = part == 0 && h % group == 0 && pos < a.kv.capacity;
  dev::head_new_row_finish(x, hc, a.qn != nullptr, a.kn != nullptr, D, a.eps, pos, BF16, w.q, w.knew, w.vnew, store,
                           store ? dev::kv_row<PAGED>(kb, pos) : nullptr, store ? dev::kv_row<PAGED>(vb, pos) : nullptr);
  __syncthreads();
  // Lane b writes block b's copy of the scores (every lane holds the same dot products).
  float* scores_at = lane < SPLIT ? cluster.map_shared_rank(w.scores, lane) : nullptr;
  for (int j0 = (part + SPLIT * warp) * kKeys; j0 < n; j0 += SPLIT * kLongWarps * kKeys)
    dev::score_keys<true, kKeys, PAGED>(w.q, kb, w.knew, pos, n, j0, D, [&](int u, float dot) {
      if (lane < SPLIT && j0 + u < n) scores_at[j0 + u] = dev::scaled_score(dot, a.scale, BF16);
    });
  cluster.sync();
  const dev::SoftmaxStats st = dev::softmax_stats(w.scores, n);
  const int set = kSets * part + warp % kSets, chunk0 = kChunks * (warp / kSets);
  float acc[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) acc[i] = 0.0f;
#pragma unroll 16
  for (int j = set; j < n; j += kLongWarps) {
    const float pj = dev::softmax_weight(st, w.scores[j], BF16);
    const float* row = dev::kv_row_warp<PAGED>(vb, j);
    const float* vr = j == pos ? w.vnew : row;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) acc[i] = fmaf(pj, vr[lane + 32 * (chunk0 + i)], acc[i]);
  }
  float* sets_at = cluster.map_shared_rank(w.part, 0);
#pragma unroll
  for (int i = 0; i < kChunks; ++i) sets_at[set * D + lane + 32 * (chunk0 + i)] = acc[i];
  cluster.sync();
  if (part == 0) dev::head_output(w.part, kLongWarps, D, kLongWarps * 32, BF16, o);
}

// The decode attention over long caches for many rows at once: W warps per (row, query head), four
// warps per block, no cluster. The cluster kernel spends 32 warps on one head, which pays when a
// lone stream's step waits on one long attention; with many rows the heads alone fill the GPU, and
// blocks of 512 threads with two cluster barriers each cost more than the work (B = 256 over ~40
// keys: 58 % of a 0.6B talker step's kernel time). W = 1 keeps everything in one warp, no block
// barrier; W = 4 (the whole block on one head) splits the keys, for fewer rows (row_attention_warps). FUSED: decode rows, as
// attention_kernel<true> (the block norms, rotates and stores the new row); else rows whose query
// is formed and whose keys are all in the cache (prefill), as attention_kernel<false>.
// Every sum keeps the general kernel's order: scores by score_keys, the softmax by softmax_stats,
// the value sums as 16 sets (keys j ≡ s mod 16, in j order; warp w of a head takes sets
// 16/W·w onwards) added in set order, so the result is bit-identical to it and to the cluster
// kernel. Shared per head: q, the new key and value [D each], the scores [capacity], and with W > 1
// the 16 sets' sums [16, D].
constexpr int kRowBlockWarps = 4;
constexpr int kRowSets = 16;  // the general kernel's value sets (its warps at long capacities)
static_assert(kRowSets == kLongWarps);

__host__ __device__ inline int64_t row_head_floats(int64_t D, int64_t capacity, int W) {
  return 3 * D + capacity + (W > 1 ? kRowSets * D : 0);
}

template <int D, int W, bool FUSED, bool BF16, bool PAGED>
__global__ void __launch_bounds__(kRowBlockWarps * 32) attention_rows_kernel(AttnParams a) {
  constexpr int kChunks = D / 32, kHeads = kRowBlockWarps / W, kSets = kRowSets / W;
  static_assert(D % 32 == 0 && kChunks <= dev::kHeadChunks && (W == 1 || W == kRowBlockWarps) && kRowSets % W == 0);
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slot = warp / W, sub = warp % W;  // the head's place in the block, the warp's in the head
  const int h = blockIdx.x * kHeads + slot;
  const int64_t r = blockIdx.y;
  const int Hq = a.Hq, Hkv = a.Hkv, group = Hq / Hkv;
  const bool active = h < Hq;  // only W = 1 has warps without a head (W = 4: one head per block)
  const int g = active ? h / group : 0;
  if (FUSED) prefetch_earlier_kv<PAGED>(a, r, a.poss[r]);
  dev::pdl_wait();
  const int pos = a.poss[r];
  const int64_t seq = a.seqs[r];
  const int n = min(pos + 1, static_cast<int>(a.kv.capacity));
  const int new_pos = FUSED ? pos : -1;  // unfused (prefill rows): every key from the cache
  float* o = a.out + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(h) * D;
  if (n <= 0) {  // the whole block: its heads share the row
    if (active && sub == 0)
#pragma unroll
      for (int i = 0; i < kChunks; ++i) o[lane + 32 * i] = 0.0f;
    return;
  }
  float* qs = smem + slot * row_head_floats(D, a.kv.capacity, W);
  float *knew = qs + D, *vnew = qs + 2 * D, *sc = qs + 3 * D, *part = sc + a.kv.capacity;
  const int64_t kstride = static_cast<int64_t>(Hkv) * D;
  const dev::KvRows kb = kv_rows<PAGED>(a.kv, false, seq, static_cast<int64_t>(g) * D, kstride);
  const dev::KvRows vb = kv_rows<PAGED>(a.kv, true, seq, static_cast<int64_t>(g) * D, kstride);
  if (!FUSED && active && sub == 0) {
    const float* q = a.q + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(h) * D;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) qs[lane + 32 * i] = q[lane + 32 * i];
    __syncwarp();
  }
  if (FUSED && active && sub == 0) {
    const float* row = a.qkv + r * a.ld;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int d = lane + 32 * i;
      qs[d] = __ldcg(row + static_cast<int64_t>(h) * D + d);
      knew[d] = __ldcg(row + static_cast<int64_t>(Hq + g) * D + d);
      vnew[d] = __ldcg(row + static_cast<int64_t>(Hq + Hkv + g) * D + d);
    }
    __syncwarp();
    dev::norm_rope_head(qs, D, a.qn, a.eps, a.inv_freq, pos, qs, BF16);
    dev::norm_rope_head(knew, D, a.kn, a.eps, a.inv_freq, pos, knew, BF16);
    __syncwarp();
    if (h % group == 0 && pos < a.kv.capacity) {
      float* kdst = dev::kv_row<PAGED>(kb, pos);
      float* vdst = dev::kv_row<PAGED>(vb, pos);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        kdst[lane + 32 * i] = knew[lane + 32 * i];
        vdst[lane + 32 * i] = vnew[lane + 32 * i];
      }
    }
  }
  if constexpr (W > 1) __syncthreads();
  if (active)
    for (int j0 = kRowSets * sub; j0 < n; j0 += kRowSets * W)
      dev::score_keys<true, kRowSets, PAGED>(qs, kb, knew, new_pos, n, j0, D, [&](int u, float dot) {
        if (lane == u && j0 + u < n) sc[j0 + u] = dev::scaled_score(dot, a.scale, BF16);
      });
  if constexpr (W > 1) __syncthreads();
  else __syncwarp();
  float acc[kSets][kChunks];
  if (active) {
    const dev::SoftmaxStats st = dev::softmax_stats(sc, n);
#pragma unroll
    for (int s = 0; s < kSets; ++s)
#pragma unroll
      for (int i = 0; i < kChunks; ++i) acc[s][i] = 0.0f;
    // Rows j0 .. j0 + 15 lie in one page (a page holds whole groups of 16 positions, nn/kv_pages.h).
    for (int j0 = 0; j0 < n; j0 += kRowSets) {
      const float* first = dev::kv_row_warp<PAGED>(vb, j0);
#pragma unroll
      for (int s = 0; s < kSets; ++s) {
        const int j = j0 + kSets * sub + s;
        if (j < n) {
          const float pj = dev::softmax_weight(st, sc[j], BF16);
          const float* vr = j == new_pos ? vnew : first + (kSets * sub + s) * vb.step;
#pragma unroll
          for (int i = 0; i < kChunks; ++i) acc[s][i] = fmaf(pj, vr[lane + 32 * i], acc[s][i]);
        }
      }
    }
  }
  if constexpr (W == 1) {
    if (!active) return;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      float total = 0.0f;
#pragma unroll
      for (int s = 0; s < kSets; ++s) total += acc[s][i];
      o[lane + 32 * i] = BF16 ? dev::round_bf16(total) : total;
    }
  } else {
#pragma unroll
    for (int s = 0; s < kSets; ++s)
#pragma unroll
      for (int i = 0; i < kChunks; ++i) part[(kSets * sub + s) * D + lane + 32 * i] = acc[s][i];
    __syncthreads();
    dev::head_output(part, kRowSets, D, kRowBlockWarps * 32, BF16, o);
  }
}

// Whether the small-cache kernel takes this shape.
bool small_attention(int64_t capacity, int64_t D) {
  return preloads(capacity, D) && dev::attention_warps(capacity) == kSmallWarps && (D == 64 || D == 128);
}

std::atomic<int64_t> g_reserved_smem{48 * 1024};
std::atomic<int64_t> g_reserved_rows_smem{48 * 1024};

// Beyond this the many-row kernel's per-head scores would leave too few warps per SM; such caches
// (more than ~5,000 positions) keep the cluster kernel.
constexpr size_t kRowMaxSmem = 96 * 1024;

size_t rows_attention_smem(int64_t capacity, int64_t head_dim, int W) {
  return static_cast<size_t>(kRowBlockWarps / W * row_head_floats(head_dim, capacity, W)) * sizeof(float);
}
// The most either W needs.
size_t rows_attention_smem(int64_t capacity, int64_t head_dim) {
  return std::max(rows_attention_smem(capacity, head_dim, 1), rows_attention_smem(capacity, head_dim, 4));
}

size_t attention_smem(int64_t capacity, int64_t head_dim) {
  if (preloads(capacity, head_dim))
    return static_cast<size_t>(preload_offset(head_dim, capacity) + 2 * capacity * head_dim) * sizeof(float);
  return static_cast<size_t>(dev::head_scratch_floats(head_dim, capacity, dev::attention_warps(capacity))) *
         sizeof(float);
}

Status check_shape(const HeadShape& h) {
  if (h.q_heads <= 0 || h.kv_heads <= 0 || h.q_heads % h.kv_heads != 0 || h.head_dim <= 0 || h.head_dim % 2 != 0)
    return make_error(ErrorCode::kInternal, "cuda attention: bad head shape");
  if (h.head_dim > 32 * dev::kHeadChunks)
    return make_error(ErrorCode::kUnsupported, "cuda attention: head_dim above 256 is not supported");
  return ok_status();
}

// The many-row kernel's shared memory for caches of up to `capacity` positions, where it takes them.
Status reserve_rows_attention(int64_t capacity, int64_t head_dim) {
  const size_t need = rows_attention_smem(capacity, head_dim);
  if (head_dim != 128 || dev::attention_warps(capacity) != kLongWarps || need > kRowMaxSmem ||
      need <= static_cast<size_t>(g_reserved_rows_smem.load()))
    return ok_status();
  for (auto* k : {attention_rows_kernel<128, 1, true, false, false>, attention_rows_kernel<128, 1, true, true, false>,
                  attention_rows_kernel<128, 1, true, false, true>, attention_rows_kernel<128, 1, true, true, true>,
                  attention_rows_kernel<128, 4, true, false, false>, attention_rows_kernel<128, 4, true, true, false>,
                  attention_rows_kernel<128, 4, true, false, true>, attention_rows_kernel<128, 4, true, true, true>,
                  attention_rows_kernel<128, 1, false, false, false>, attention_rows_kernel<128, 1, false, true, false>,
                  attention_rows_kernel<128, 1, false, false, true>, attention_rows_kernel<128, 1, false, true, true>,
                  attention_rows_kernel<128, 4, false, false, false>, attention_rows_kernel<128, 4, false, true, false>,
                  attention_rows_kernel<128, 4, false, false, true>, attention_rows_kernel<128, 4, false, true, true>})
    CHORUS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(need)));
  g_reserved_rows_smem.store(static_cast<int64_t>(need));
  return ok_status();
}

}  // namespace

Status attention_reserve(int64_t capacity, int64_t head_dim) {
  CHORUS_TRY(reserve_rows_attention(capacity, head_dim));
  const size_t need = attention_smem(capacity, head_dim);
  if (need <= static_cast<size_t>(g_reserved_smem.load())) return ok_status();
  int dev = 0, max_optin = 0;
  CHORUS_CUDA_TRY(cudaGetDevice(&dev));
  CHORUS_CUDA_TRY(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  // Static shared memory of the kernel (reduction scratch) comes on top of the dynamic part.
  if (need + 512 > static_cast<size_t>(max_optin))
    return make_error(ErrorCode::kUnsupported, "cuda attention: a context of " + std::to_string(capacity) +
                                                   " positions needs more shared memory than the GPU has");
  CHORUS_CUDA_TRY(cudaFuncSetAttribute(attention_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(need)));
  CHORUS_CUDA_TRY(cudaFuncSetAttribute(attention_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(need)));
  CHORUS_CUDA_TRY(cudaFuncSetAttribute(attention_kernel<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(need)));
  for (auto* k : {attention_kernel<false, false, true>, attention_kernel<true, false, true>})
    CHORUS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(need)));
  for (auto* k : {attention_small_kernel<64, false>, attention_small_kernel<64, true>, attention_small_kernel<128, false>,
                  attention_small_kernel<128, true>, attention_split_kernel<128, false, kLongSplit>,
                  attention_split_kernel<128, true, kLongSplit>, attention_split_kernel<128, false, kLongSplit, true>,
                  attention_split_kernel<128, true, kLongSplit, true>})
    CHORUS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(need)));
  g_reserved_smem.store(static_cast<int64_t>(need));
  return ok_status();
}

Status qk_norm_rope_store(const float* qkv, int64_t ld_qkv, HeadShape h, const float* q_norm, const float* k_norm,
                          float eps, const float* inv_freq, RowMap rows, KvLayer kv, float* q_out, cudaStream_t s,
                          bool bf16) {
  CHORUS_TRY(check_shape(h));
  if (rows.rows <= 0) return ok_status();
  const size_t smem = static_cast<size_t>(kNormWarps * h.head_dim) * sizeof(float);
  const unsigned blocks = static_cast<unsigned>((h.q_heads + h.kv_heads + kNormWarps - 1) / kNormWarps);
  CHORUS_CUDA_TRY(launch(qk_norm_rope_store_kernel, dim3(blocks, static_cast<unsigned>(rows.rows)), dim3(kNormWarps * 32), smem,
                         s, qkv, ld_qkv, static_cast<int>(h.q_heads), static_cast<int>(h.kv_heads),
                         static_cast<int>(h.head_dim), q_norm, k_norm, eps, inv_freq, rows.seq, rows.pos, kv, q_out, bf16));
  return ok_status();
}

namespace {
// The specialized kernels; off only in tests (set_small_attention, set_long_attention).
std::atomic<bool> g_small_attention{true};
std::atomic<bool> g_long_attention{true};
std::atomic<int> g_row_attention{kRowAttentionAuto};

// Warps per query head of the many-row kernel for this many rows, 0 for the cluster kernel. The
// host does not know the rows' context lengths (positions live on the device, and a captured graph
// serves every step of its batch size), so the choice goes by rows alone. On the H100, per call
// over 40–1,000 keys (scripts/device/attention_harness.cu): below 32 rows the cluster kernel is
// fastest at 250 keys and more (up to 4× the one-warp kernel at 16 rows); from 32 rows four warps
// per head win up to 4.8× over short contexts and lose at most 15 % over long ones; from 128 rows
// one warp per head is fastest at every length (7× at 40 keys, 1.4× at 1,000).
int row_attention_warps(int64_t rows) {
  const int forced = g_row_attention.load();
  if (forced != kRowAttentionAuto) return forced;
  return rows >= kRowAttentionOneWarp ? 1 : rows >= kRowAttentionRows ? 4 : 0;
}

template <bool BF16, bool PAGED>
cudaError_t launch_long_attention(const AttnParams& p, int64_t rows, size_t smem, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(kLongSplit * p.Hq), static_cast<unsigned>(rows));
  return launch(attention_split_kernel<128, BF16, kLongSplit, PAGED>, grid, dim3(kLongWarps * 32), smem, s, p);
}

template <int W, bool FUSED, bool BF16, bool PAGED>
cudaError_t launch_rows_attention(const AttnParams& p, int64_t rows, cudaStream_t s) {
  constexpr int heads = kRowBlockWarps / W;
  const dim3 grid(static_cast<unsigned>((p.Hq + heads - 1) / heads), static_cast<unsigned>(rows));
  return launch(attention_rows_kernel<128, W, FUSED, BF16, PAGED>, grid, dim3(kRowBlockWarps * 32),
                rows_attention_smem(p.kv.capacity, p.D, W), s, p);
}
template <int W, bool FUSED>
cudaError_t launch_rows_attention(const AttnParams& p, int64_t rows, cudaStream_t s) {
  if (p.kv.pages)
    return p.bf16 ? launch_rows_attention<W, FUSED, true, true>(p, rows, s)
                  : launch_rows_attention<W, FUSED, false, true>(p, rows, s);
  return p.bf16 ? launch_rows_attention<W, FUSED, true, false>(p, rows, s)
                : launch_rows_attention<W, FUSED, false, false>(p, rows, s);
}
// Whether the many-row kernel takes this call, and with how many warps per head (0: it does not).
int rows_attention_for(const AttnParams& p, int64_t rows) {
  const int w = row_attention_warps(rows);
  const bool fits = static_cast<int64_t>(rows_attention_smem(p.kv.capacity, p.D)) <= g_reserved_rows_smem.load();
  return w > 0 && p.D == 128 && dev::attention_warps(p.kv.capacity) == kLongWarps && fits ? w : 0;
}

Status launch_attention(bool fused, const AttnParams& p, int64_t rows, cudaStream_t s) {
  const size_t smem = attention_smem(p.kv.capacity, p.D);
  if (smem > static_cast<size_t>(g_reserved_smem.load()))
    return make_error(ErrorCode::kInternal, "cuda attention: call attention_reserve for this capacity first");
  const dim3 grid(static_cast<unsigned>(p.Hq), static_cast<unsigned>(rows));
  const dim3 block(static_cast<unsigned>(attention_threads(p.kv.capacity)));
  const bool paged = p.kv.pages != nullptr;  // the small-cache kernels preload contiguous rows
  const int rows_w = rows_attention_for(p, rows);
  if (!fused && rows_w > 0)
    CHORUS_CUDA_TRY((rows_w == 1 ? launch_rows_attention<1, false>(p, rows, s)
                                 : launch_rows_attention<4, false>(p, rows, s)));
  else if (!fused && paged) CHORUS_CUDA_TRY(launch(attention_kernel<false, false, true>, grid, block, smem, s, p));
  else if (!fused) CHORUS_CUDA_TRY(launch(attention_kernel<false>, grid, block, smem, s, p));
  else if (!paged && small_attention(p.kv.capacity, p.D) && g_small_attention.load()) {
    auto* k = p.D == 64 ? (p.bf16 ? attention_small_kernel<64, true> : attention_small_kernel<64, false>)
                        : (p.bf16 ? attention_small_kernel<128, true> : attention_small_kernel<128, false>);
    CHORUS_CUDA_TRY(launch(k, grid, block, smem, s, p));
  } else if (!paged && preloads(p.kv.capacity, p.D))
    CHORUS_CUDA_TRY(launch(attention_kernel<true, true>, grid, block, smem, s, p));
  else if (rows_w > 0)
    CHORUS_CUDA_TRY((rows_w == 1 ? launch_rows_attention<1, true>(p, rows, s)
                                 : launch_rows_attention<4, true>(p, rows, s)));
  else if (p.D == 128 && dev::attention_warps(p.kv.capacity) == kLongWarps && g_long_attention.load()) {
    const auto go = paged ? (p.bf16 ? launch_long_attention<true, true> : launch_long_attention<false, true>)
                          : (p.bf16 ? launch_long_attention<true, false> : launch_long_attention<false, false>);
    CHORUS_CUDA_TRY(go(p, rows, smem, s));
  } else if (paged) CHORUS_CUDA_TRY(launch(attention_kernel<true, false, true>, grid, block, smem, s, p));
  else CHORUS_CUDA_TRY(launch(attention_kernel<true>, grid, block, smem, s, p));
  return ok_status();
}
}  // namespace

namespace {
// The parameters both entry points share.
AttnParams common_params(HeadShape h, float scale, RowMap rows, KvLayer kv, float* out, bool bf16) {
  AttnParams p{};
  p.Hq = static_cast<int>(h.q_heads);
  p.Hkv = static_cast<int>(h.kv_heads);
  p.D = static_cast<int>(h.head_dim);
  p.scale = scale;
  p.seqs = rows.seq;
  p.poss = rows.pos;
  p.kv = kv;
  p.out = out;
  p.bf16 = bf16;
  return p;
}
}  // namespace

Status attention(const float* q, HeadShape h, float scale, RowMap rows, KvLayer kv, float* out, cudaStream_t s,
                 bool bf16) {
  CHORUS_TRY(check_shape(h));
  if (rows.rows <= 0) return ok_status();
  AttnParams p = common_params(h, scale, rows, kv, out, bf16);
  p.q = q;
  return launch_attention(false, p, rows.rows, s);
}

void set_small_attention(bool on) { g_small_attention.store(on); }
void set_long_attention(bool on) { g_long_attention.store(on); }
void set_row_attention(int warps_per_head) {
  g_row_attention.store(warps_per_head == 0 || warps_per_head == 1 || warps_per_head == 4 ? warps_per_head
                                                                                         : kRowAttentionAuto);
}

Status attention_decode(const float* qkv, int64_t ld_qkv, HeadShape h, const float* q_norm, const float* k_norm,
                        float eps, const float* inv_freq, float scale, RowMap rows, KvLayer kv, float* out,
                        cudaStream_t s, bool bf16) {
  CHORUS_TRY(check_shape(h));
  if (rows.rows <= 0) return ok_status();
  AttnParams p = common_params(h, scale, rows, kv, out, bf16);
  p.qkv = qkv;
  p.ld = ld_qkv;
  p.qn = q_norm;
  p.kn = k_norm;
  p.eps = eps;
  p.inv_freq = inv_freq;
  return launch_attention(true, p, rows.rows, s);
}

}  // namespace chorus::cuda
