// The decode and prefill attention over long caches for many rows at once (the serving pools):
// kernels that spend a few warps on each (row, query head) or (row, kv group) instead of the
// cluster kernel's 32, and the rule that picks one by row count.
#include <algorithm>
#include <atomic>

#include "runtime/cuda/attend_head.cuh"
#include "runtime/cuda/attention_internal.cuh"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"

namespace chorus::cuda {

namespace {

// The decode attention over long caches for many rows at once: W warps per (row, query head), four
// warps per block, no cluster. The cluster kernel spends 32 warps on one head, which pays when a
// lone stream's step waits on one long attention; with many rows the heads alone fill the GPU, and
// blocks of 512 threads with two cluster barriers each cost more than the work (B = 256 over ~40
// keys: 58 % of a 0.6B talker step's kernel time). W = 1 keeps everything in one warp, no block
// barrier; W = 4 (the whole block on one head) splits the keys (row_attention_variant picks). FUSED:
// decode rows, as attention_kernel<true> (the block norms, rotates and stores the new row); else
// rows whose query is formed and whose keys are all in the cache (prefill), as
// attention_kernel<false>.
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

// A fused kernel's new key and value (lane l: dims l + 32i) into the cache at pos, by one warp.
template <int kChunks, bool PAGED>
__device__ __forceinline__ void store_new_row(const dev::KvRows& kb, const dev::KvRows& vb, int pos, const float* knew,
                                              const float* vnew) {
  const int lane = threadIdx.x & 31;
  float* kdst = dev::kv_row<PAGED>(kb, pos);
  float* vdst = dev::kv_row<PAGED>(vb, pos);
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    kdst[lane + 32 * i] = knew[lane + 32 * i];
    vdst[lane + 32 * i] = vnew[lane + 32 * i];
  }
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
    if (h % group == 0 && pos < a.kv.capacity) store_new_row<kChunks, PAGED>(kb, vb, pos, knew, vnew);
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

// The many-row decode attention with a block of four warps per (row, kv group) instead of per
// query head: the group's G query heads share every key and value row the warps read, so a row's
// cache is read once instead of G times (at a few hundred positions per row the per-head kernel's
// time is the cache read). The warps split the keys (warp w scores the chunks of 16 keys w, w + 4,
// ... and forms the value sets 4w .. 4w + 3), for more loads in flight per row than one warp issues.
// Every sum keeps attention_rows_kernel's order: scores by score_keys_heads, the softmax by
// softmax_stats (each warp over all of the row's scores), the value sums as the 16 sets (keys
// j ≡ s mod 16, in j order) added in set order, so the result is bit-identical to it and to the
// cluster kernel. A warp forms its sets up to 16 / G at a time (a pass over the keys each), which
// keeps G heads' sums in registers. Shared: the G queries, the new key and value [D each], the G
// heads' scores [G, capacity], and the sets' sums [G, 16, D].
__host__ __device__ inline int64_t group_block_floats(int64_t D, int64_t capacity, int G) {
  return (G + 2) * D + G * capacity + G * kRowSets * D;
}

template <int D, int G, bool FUSED, bool BF16, bool PAGED>
__global__ void __launch_bounds__(kRowBlockWarps * 32) attention_group_kernel(AttnParams a) {
  constexpr int kChunks = D / 32, W = kRowBlockWarps, kWarpSets = kRowSets / W;
  constexpr int kPassSets = kRowSets / G < kWarpSets ? kRowSets / G : kWarpSets;
  static_assert(D % 32 == 0 && kChunks <= dev::kHeadChunks && kRowSets % G == 0 && kWarpSets % kPassSets == 0);
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int Hq = a.Hq, Hkv = a.Hkv;
  const int cap = static_cast<int>(a.kv.capacity);
  if (FUSED) prefetch_earlier_kv<PAGED>(a, r, a.poss[r]);
  dev::pdl_wait();
  const int pos = a.poss[r];
  const int64_t seq = a.seqs[r];
  const int n = min(pos + 1, cap);
  const int new_pos = FUSED ? pos : -1;  // unfused (prefill rows): every key from the cache
  float* o = a.out + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(g) * G * D;
  if (n <= 0) {  // the whole block
    if (warp == 0)
#pragma unroll
      for (int i = 0; i < G * kChunks; ++i) o[lane + 32 * i] = 0.0f;
    return;
  }
  float* qs = smem;
  float *knew = qs + G * D, *vnew = knew + D, *sc = vnew + D, *part = sc + G * cap;
  const int64_t kstride = static_cast<int64_t>(Hkv) * D;
  const dev::KvRows kb = kv_rows<PAGED>(a.kv, false, seq, static_cast<int64_t>(g) * D, kstride);
  const dev::KvRows vb = kv_rows<PAGED>(a.kv, true, seq, static_cast<int64_t>(g) * D, kstride);
  if (warp == 0) {
    if constexpr (FUSED) {
      const float* row = a.qkv + r * a.ld;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int d = lane + 32 * i;
#pragma unroll
        for (int h = 0; h < G; ++h) qs[h * D + d] = __ldcg(row + static_cast<int64_t>(g * G + h) * D + d);
        knew[d] = __ldcg(row + static_cast<int64_t>(Hq + g) * D + d);
        vnew[d] = __ldcg(row + static_cast<int64_t>(Hq + Hkv + g) * D + d);
      }
      __syncwarp();
#pragma unroll
      for (int h = 0; h < G; ++h) dev::norm_rope_head(qs + h * D, D, a.qn, a.eps, a.inv_freq, pos, qs + h * D, BF16);
      dev::norm_rope_head(knew, D, a.kn, a.eps, a.inv_freq, pos, knew, BF16);
      __syncwarp();
      if (pos < cap) store_new_row<kChunks, PAGED>(kb, vb, pos, knew, vnew);
    } else {
      const float* q = a.q + r * static_cast<int64_t>(Hq) * D + static_cast<int64_t>(g) * G * D;
#pragma unroll
      for (int i = 0; i < G * kChunks; ++i) qs[lane + 32 * i] = q[lane + 32 * i];
      __syncwarp();
    }
  }
  __syncthreads();
  for (int j0 = kRowSets * warp; j0 < n; j0 += kRowSets * W)
    dev::score_keys_heads<D, G, kRowSets, PAGED>(qs, kb, knew, new_pos, n, j0, [&](int h, int u, float dot) {
      if (lane == u && j0 + u < n) sc[h * cap + j0 + u] = dev::scaled_score(dot, a.scale, BF16);
    });
  __syncthreads();
  dev::SoftmaxStats st[G];
#pragma unroll
  for (int h = 0; h < G; ++h) st[h] = dev::softmax_stats(sc + h * cap, n);
#pragma unroll 1
  for (int s0 = kWarpSets * warp; s0 < kWarpSets * (warp + 1); s0 += kPassSets) {
    float acc[G][kPassSets][kChunks];
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
      for (int s = 0; s < kPassSets; ++s)
#pragma unroll
        for (int i = 0; i < kChunks; ++i) acc[h][s][i] = 0.0f;
    // Rows j0 .. j0 + 15 lie in one page (a page holds whole groups of 16 positions, nn/kv_pages.h).
#pragma unroll 2
    for (int j0 = 0; j0 < n; j0 += kRowSets) {
      const float* first = dev::kv_row_warp<PAGED>(vb, j0);
#pragma unroll
      for (int s = 0; s < kPassSets; ++s) {
        const int j = j0 + s0 + s;
        if (j < n) {
          const float* vr = j == new_pos ? vnew : first + (s0 + s) * vb.step;
          float v[kChunks];
#pragma unroll
          for (int i = 0; i < kChunks; ++i) v[i] = vr[lane + 32 * i];
#pragma unroll
          for (int h = 0; h < G; ++h) {
            const float pj = dev::softmax_weight(st[h], sc[h * cap + j], BF16);
#pragma unroll
            for (int i = 0; i < kChunks; ++i) acc[h][s][i] = fmaf(pj, v[i], acc[h][s][i]);
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
      for (int s = 0; s < kPassSets; ++s)
#pragma unroll
        for (int i = 0; i < kChunks; ++i) part[(h * kRowSets + s0 + s) * D + lane + 32 * i] = acc[h][s][i];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < G; ++h) dev::head_output(part + h * kRowSets * D, kRowSets, D, W * 32, BF16, o + h * D);
}

std::atomic<int64_t> g_reserved_rows_smem{48 * 1024};
std::atomic<int> g_row_attention{kRowAttentionAuto};

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
// The per-group kernel's, for G query heads per kv group (instantiated for G = 2 and 4).
size_t group_attention_smem(int64_t capacity, int64_t head_dim, int G) {
  return static_cast<size_t>(group_block_floats(head_dim, capacity, G)) * sizeof(float);
}
std::atomic<int64_t> g_reserved_group_smem[2] = {48 * 1024, 48 * 1024};  // G = 2, 4
int group_index(int64_t G) { return G == 2 ? 0 : G == 4 ? 1 : -1; }

template <int G>
Status set_group_attention_smem(size_t bytes) {
  for (auto* k : {attention_group_kernel<128, G, true, false, false>,
                  attention_group_kernel<128, G, true, true, false>,
                  attention_group_kernel<128, G, true, false, true>,
                  attention_group_kernel<128, G, true, true, true>,
                  attention_group_kernel<128, G, false, false, false>,
                  attention_group_kernel<128, G, false, true, false>,
                  attention_group_kernel<128, G, false, false, true>,
                  attention_group_kernel<128, G, false, true, true>})
    CHORUS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return ok_status();
}

template <int G>
Status reserve_group_attention(int64_t capacity) {
  const size_t need = group_attention_smem(capacity, 128, G);
  std::atomic<int64_t>& reserved = g_reserved_group_smem[group_index(G)];
  if (need > kRowMaxSmem || need <= static_cast<size_t>(reserved.load())) return ok_status();
  CHORUS_TRY(set_group_attention_smem<G>(need));
  reserved.store(static_cast<int64_t>(need));
  return ok_status();
}

// Which many-row kernel takes this many rows (0: the cluster kernel; 1, 4: warps per query head;
// kRowAttentionGroup4: four warps per kv group). The host does not know the rows' context lengths
// (positions live on the device, and a captured graph serves every step of its batch size), so the
// choice goes by rows alone. On the H100, per call over 40–1,000 keys
// (scripts/device/attention_harness.cu): below 32 rows the cluster kernel is fastest at 250 keys
// and more; from 32 rows four warps per head win up to 4.8× over short contexts and lose at most
// 15 % over long ones; from 64 rows four warps per kv group take 0.77–0.87× the time of four warps
// per head at 64 rows and 0.44–0.79× that of a one-warp-per-group form at 64–128 rows (at 256–1,024
// rows 0.86–1.09×); serving the 0.6B at ~190 streams, a generation step took 0.73–0.77× as long.
int row_attention_variant(int64_t rows) {
  const int forced = g_row_attention.load();
  if (forced != kRowAttentionAuto) return forced;
  return rows >= kRowAttentionGroupRows ? kRowAttentionGroup4 : rows >= kRowAttentionRows ? 4 : 0;
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
template <int G, bool FUSED>
cudaError_t launch_group_attention(const AttnParams& p, int64_t rows, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(p.Hkv), static_cast<unsigned>(rows));
  const size_t smem = group_attention_smem(p.kv.capacity, p.D, G);
  const bool paged = p.kv.pages != nullptr;
  auto* k = paged ? (p.bf16 ? attention_group_kernel<128, G, FUSED, true, true>
                            : attention_group_kernel<128, G, FUSED, false, true>)
                  : (p.bf16 ? attention_group_kernel<128, G, FUSED, true, false>
                            : attention_group_kernel<128, G, FUSED, false, false>);
  return launch(k, grid, dim3(kRowBlockWarps * 32), smem, s, p);
}
template <bool FUSED>
cudaError_t launch_group_attention(const AttnParams& p, int64_t rows, cudaStream_t s) {
  return p.Hq / p.Hkv == 2 ? launch_group_attention<2, FUSED>(p, rows, s)
                           : launch_group_attention<4, FUSED>(p, rows, s);
}

template <bool FUSED>
cudaError_t launch_variant(const AttnParams& p, int64_t rows, int variant, cudaStream_t s) {
  if (variant == kRowAttentionGroup4) return launch_group_attention<FUSED>(p, rows, s);
  return variant == 1 ? launch_rows_attention<1, FUSED>(p, rows, s) : launch_rows_attention<4, FUSED>(p, rows, s);
}

}  // namespace

// The many-row kernels' shared memory for caches of up to `capacity` positions, where they take them.
Status reserve_rows_attention(int64_t capacity, int64_t head_dim) {
  if (head_dim == 128 && dev::attention_warps(capacity) == kLongWarps) {
    CHORUS_TRY(reserve_group_attention<2>(capacity));
    CHORUS_TRY(reserve_group_attention<4>(capacity));
  }
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

// The many-row kernel `variant` (row_attention_variant) for this call.
cudaError_t launch_many_rows(bool fused, const AttnParams& p, int64_t rows, int variant, cudaStream_t s) {
  return fused ? launch_variant<true>(p, rows, variant, s) : launch_variant<false>(p, rows, variant, s);
}

// Which many-row kernel takes this call (row_attention_variant' numbers; 0: none). The per-group
// kernel where the group size has an instantiation and its shared memory fits, else four warps per
// head.
int rows_attention_for(const AttnParams& p, int64_t rows) {
  int w = row_attention_variant(rows);
  if (w <= 0 || p.D != 128 || dev::attention_warps(p.kv.capacity) != kLongWarps) return 0;
  if (w == kRowAttentionGroup4) {
    const int gi = group_index(p.Hq / p.Hkv);
    if (gi >= 0 && static_cast<int64_t>(group_attention_smem(p.kv.capacity, p.D, p.Hq / p.Hkv)) <=
                       g_reserved_group_smem[gi].load())
      return w;
    w = 4;
  }
  const bool fits = static_cast<int64_t>(rows_attention_smem(p.kv.capacity, p.D)) <= g_reserved_rows_smem.load();
  return fits ? w : 0;
}

void set_row_attention(int variant) {
  const int v = variant;
  const bool known = v == 0 || v == 1 || v == 4 || v == kRowAttentionGroup4;
  g_row_attention.store(known ? v : kRowAttentionAuto);
}

}  // namespace chorus::cuda
