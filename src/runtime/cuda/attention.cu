// Attention over a device KV cache: QK-norm + rotary embedding + cache store of the new rows, then
// causal grouped-query attention per (row, query head).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>

#include "runtime/cuda/attend_head.cuh"
#include "runtime/cuda/attention_internal.cuh"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/head_norm_rope.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kNormWarps = 4;

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

// Whether the small-cache kernel takes this shape.
bool small_attention(int64_t capacity, int64_t D) {
  return preloads(capacity, D) && dev::attention_warps(capacity) == kSmallWarps && (D == 64 || D == 128);
}

std::atomic<int64_t> g_reserved_smem{48 * 1024};

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

template <bool BF16, bool PAGED>
cudaError_t launch_long_attention(const AttnParams& p, int64_t rows, size_t smem, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(kLongSplit * p.Hq), static_cast<unsigned>(rows));
  return launch(attention_split_kernel<128, BF16, kLongSplit, PAGED>, grid, dim3(kLongWarps * 32), smem, s, p);
}

Status launch_attention(bool fused, const AttnParams& p, int64_t rows, cudaStream_t s) {
  const size_t smem = attention_smem(p.kv.capacity, p.D);
  if (smem > static_cast<size_t>(g_reserved_smem.load()))
    return make_error(ErrorCode::kInternal, "cuda attention: call attention_reserve for this capacity first");
  const dim3 grid(static_cast<unsigned>(p.Hq), static_cast<unsigned>(rows));
  const dim3 block(static_cast<unsigned>(attention_threads(p.kv.capacity)));
  const bool paged = p.kv.pages != nullptr;  // the small-cache kernels preload contiguous rows
  const int rows_w = rows_attention_for(p, rows);
  if (!fused && rows_w > 0) CHORUS_CUDA_TRY(launch_many_rows(false, p, rows, rows_w, s));
  else if (!fused && paged) CHORUS_CUDA_TRY(launch(attention_kernel<false, false, true>, grid, block, smem, s, p));
  else if (!fused) CHORUS_CUDA_TRY(launch(attention_kernel<false>, grid, block, smem, s, p));
  else if (!paged && small_attention(p.kv.capacity, p.D) && g_small_attention.load()) {
    auto* k = p.D == 64 ? (p.bf16 ? attention_small_kernel<64, true> : attention_small_kernel<64, false>)
                        : (p.bf16 ? attention_small_kernel<128, true> : attention_small_kernel<128, false>);
    CHORUS_CUDA_TRY(launch(k, grid, block, smem, s, p));
  } else if (!paged && preloads(p.kv.capacity, p.D))
    CHORUS_CUDA_TRY(launch(attention_kernel<true, true>, grid, block, smem, s, p));
  else if (rows_w > 0) CHORUS_CUDA_TRY(launch_many_rows(true, p, rows, rows_w, s));
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
