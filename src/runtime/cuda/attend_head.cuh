// One query head's decode attention, in steps shared by the fused decode-attention kernel
// (attention.cu) and the persistent decoder stack (decode_stack.cu), which must agree bit for bit.
// A block runs them with `warps` working warps; shared scratch: q, the new key and value [D each],
// scores [n], per-warp partial outputs [warps, D].
#pragma once

#include "runtime/cuda/head_norm_rope.cuh"

namespace chorus::cuda::dev {

constexpr int kKeysPerWarp = 8;    // keys one warp scores at a time
constexpr int kSmallContext = 64;  // KV capacities up to this attend with 4 warps, longer with 16

__host__ __device__ inline int attention_warps(int64_t capacity) { return capacity > kSmallContext ? 16 : 4; }

// One sequence's cached keys (or values) of one layer at one kv head's columns: the row of each
// position, in a contiguous cache or shared memory (base, step), or a paged cache (ops.h KvLayer:
// pages, off, step, shift). Whether rows are paged is a template parameter of the functions that
// read them (kv_row), so the contiguous kernels keep their code and registers.
//
// Paged rows in the warp loops (score_keys, head_values, the long-context kernel): lane p holds
// page p's address (lane_page, read when the rows are made, before the new row is computed), so a
// row's address is a shuffle away. Read from the table inside the loops, every group of rows
// waits for a page-table read that has usually left L1 by then (the persistent stack's shared
// memory leaves little L1): the 0.6B talker measured 0.05 ms a frame slower that way on the H200.
// Pages past the first 32 (2,048 positions) are read from the table.
struct KvRows {
  float* base = nullptr;          // contiguous: position 0's row
  float* const* pages = nullptr;  // paged: the sequence's page table (device addresses)
  float* lane_page = nullptr;     // paged: page (lane)'s address, for kv_row_warp
  int64_t off = 0;                // paged: the rows' offset inside a page (floats)
  int64_t step = 0;               // floats from one position to the next
  int shift = 0;                  // paged: log2 of the positions per page
};
template <bool PAGED>
__device__ __forceinline__ float* kv_row(const KvRows& r, int j) {
  if constexpr (PAGED) return r.pages[j >> r.shift] + r.off + static_cast<int64_t>(j & ((1 << r.shift) - 1)) * r.step;
  else return r.base + static_cast<int64_t>(j) * r.step;
}
// Paged rows of a sequence whose table has `table_pages` entries (every thread of a warp that will
// call kv_row_warp makes them, so every lane loads its page).
__device__ __forceinline__ KvRows paged_rows(float* const* pages, int64_t table_pages, int64_t off, int64_t step,
                                             int shift) {
  KvRows r;
  r.pages = pages;
  r.off = off;
  r.step = step;
  r.shift = shift;
  const int lane = threadIdx.x & 31;
  r.lane_page = lane < table_pages ? pages[lane] : nullptr;
  return r;
}
// Row j by a whole warp: j, and so the branch, is the same in every lane (the shuffle needs all 32).
template <bool PAGED>
__device__ __forceinline__ float* kv_row_warp(const KvRows& r, int j) {
  if constexpr (PAGED) {
    const int p = j >> r.shift;
    float* page = p < 32 ? reinterpret_cast<float*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(r.lane_page), p))
                         : r.pages[p];
    return page + r.off + static_cast<int64_t>(j & ((1 << r.shift) - 1)) * r.step;
  } else {
    return r.base + static_cast<int64_t>(j) * r.step;
  }
}
__device__ __forceinline__ KvRows contiguous_rows(const float* base, int64_t step) {
  KvRows r;
  r.base = const_cast<float*>(base);
  r.step = step;
  return r;
}

// The shared scratch of one head's attention over n keys: q, the new key and value [D each],
// scores [n], per-warp partial outputs [warps, D].
struct HeadScratch {
  float *q, *knew, *vnew, *scores, *part;
};
__device__ inline HeadScratch head_scratch(float* sm, int D, int n) {
  return {sm, sm + D, sm + 2 * D, sm + 3 * D, sm + 3 * D + n};
}
// Its floats for up to `capacity` keys.
__host__ __device__ inline int64_t head_scratch_floats(int64_t D, int64_t capacity, int warps) {
  return 3 * D + capacity + warps * D;
}

// Long contexts: part `part` of `parts` of one sequence's cached keys and values of the earlier
// positions (`floats` each from k and v: whole rows of every kv head, so contiguous) prefetched into
// L2, so that the attention's chain of dependent reads hits L2 instead of queueing in HBM behind the
// weight stream. One thread; a hint only (a stale position prefetches a row less).
__device__ inline void prefetch_kv_l2(const float* k, const float* v, int64_t floats, int part, int parts) {
  const int64_t chunk = ((floats + parts - 1) / parts + 3) & ~int64_t{3};  // whole 16-byte units
  const int64_t begin = part * chunk, end = min(floats, begin + chunk);
  if (begin >= end) return;
  const unsigned bytes = static_cast<unsigned>((end - begin) * sizeof(float));
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(k + begin), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(v + begin), "r"(bytes) : "memory");
}

// The same over a paged cache: the earlier positions' rows (`row` floats each) are contiguous
// within each page (at + k_off and + v_off), so the part is prefetched piece by piece per page.
__device__ inline void prefetch_kv_pages_l2(float* const* pages, int64_t k_off, int64_t v_off, int shift,
                                            int64_t earlier, int64_t row, int part, int parts) {
  const int64_t floats = earlier * row, page_floats = row << shift;
  const int64_t chunk = ((floats + parts - 1) / parts + 3) & ~int64_t{3};
  const int64_t begin = part * chunk, end = min(floats, begin + chunk);
  for (int64_t b = begin; b < end;) {
    const int64_t page = b / page_floats, in = b - page * page_floats;
    const int64_t e = min(end, (page + 1) * page_floats);
    const unsigned bytes = static_cast<unsigned>(((e - b) * sizeof(float) + 15) & ~size_t{15});
    const float* base = pages[page];
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + k_off + in), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + v_off + in), "r"(bytes) : "memory");
    b = e;
  }
}

// The new row's part of a decode attention in three steps, so that a kernel can take the first
// before its PDL wait: head_new_row_consts (warp 0: the query norm's constants, warp 1: the key
// norm's, both at the position read before the wait), head_new_row_load (warps 0..2: the lane's
// dims of the query head h, the kv group's key, its value, in registers, read through L2 since
// another block may have written them in the same kernel; the row does not depend on the
// position, so these loads go out together with the position's) and head_new_row_finish (the
// norm and rotation → qs, knew, vnew; when `store`, the key and value also to kdst / vdst).
__device__ inline HeadRowConsts head_new_row_consts(const float* q_norm, const float* k_norm, const float* inv_freq,
                                                   int D, int pos) {
  const int warp = threadIdx.x >> 5;
  HeadRowConsts hc{};
  if (warp < 2) hc = head_row_consts(warp == 0 ? q_norm : k_norm, inv_freq, D, pos);
  return hc;
}

__device__ inline void head_new_row_load(const float* row, int h, int g, int Hq, int Hkv, int D,
                                         float (&x)[kHeadChunks]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t head = warp == 0 ? h : warp == 1 ? Hq + g : Hq + Hkv + g;
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) {
    const int d = lane + 32 * i;
    x[i] = warp < 3 && d < D ? __ldcg(row + head * D + d) : 0.0f;
  }
}

__device__ inline void head_new_row_finish(const float (&x)[kHeadChunks], HeadRowConsts& hc, bool q_normed,
                                           bool k_normed, int D, float eps, int pos, bool bf16, float* qs, float* knew,
                                           float* vnew, bool store, float* kdst, float* vdst) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp >= 3) return;
  float* buf = warp == 0 ? qs : warp == 1 ? knew : vnew;
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) {
    const int d = lane + 32 * i;
    if (d < D) buf[d] = x[i];
  }
  if (warp == 2) {
    if (store)
#pragma unroll
      for (int i = 0; i < kHeadChunks; ++i) {
        const int d = lane + 32 * i;
        if (d < D) vdst[d] = x[i];
      }
    return;
  }
  if (hc.pos != pos) rotate_at(hc, D, pos);  // another kernel moved the position after the wait
  __syncwarp();
  if (warp == 0 ? q_normed : k_normed) norm_head(buf, D, hc, eps, bf16);
  rope_head<false>(buf, D, hc, pos, buf, bf16);
  __syncwarp();
  if (warp == 1 && store)
    for (int d = lane; d < D; d += 32) kdst[d] = knew[d];
}

// The whole step with the constants loaded after the row, the order the persistent stack (which
// preloads its norms itself) is tuned for: warps 0..2 read their vectors through L2 into qs, knew,
// vnew.
__device__ inline void head_new_row(const float* row, int h, int g, int Hq, int Hkv, int D, const float* q_norm,
                                    const float* k_norm, float eps, const float* inv_freq, int pos, bool bf16,
                                    float* qs, float* knew, float* vnew, bool store, float* kdst, float* vdst) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp == 0) {
    for (int d = lane; d < D; d += 32) qs[d] = __ldcg(row + static_cast<int64_t>(h) * D + d);
    __syncwarp();
    norm_rope_head(qs, D, q_norm, eps, inv_freq, pos, qs, bf16);
  } else if (warp == 1) {
    for (int d = lane; d < D; d += 32) knew[d] = __ldcg(row + static_cast<int64_t>(Hq + g) * D + d);
    __syncwarp();
    norm_rope_head(knew, D, k_norm, eps, inv_freq, pos, knew, bf16);
    __syncwarp();
    if (store)
      for (int d = lane; d < D; d += 32) kdst[d] = knew[d];
  } else if (warp == 2) {
    for (int d = lane; d < D; d += 32) {
      const float v = __ldcg(row + static_cast<int64_t>(Hq + Hkv + g) * D + d);
      vnew[d] = v;
      if (store) vdst[d] = v;
    }
  }
}

// A key's score from its dot product with the query: scaled, rounded as the mode rounds.
__device__ __forceinline__ float scaled_score(float dot, float scale, bool bf16) {
  return bf16 ? round_bf16(__fmul_rn(round_bf16(dot), scale)) : dot * scale;
}

// Keys j0 .. j0 + KEYS − 1's rows (a whole warp: kv_row_warp), key new_pos's at knew.
template <int KEYS, bool PAGED>
__device__ __forceinline__ void key_rows(const KvRows& kb, const float* knew, int new_pos, int j0,
                                         const float* (&kr)[KEYS]) {
  const float* first = kv_row_warp<PAGED>(kb, j0);
#pragma unroll
  for (int u = 0; u < KEYS; ++u) kr[u] = j0 + u == new_pos ? knew : first + u * kb.step;
}

// The dot products q · k_j of keys j0 .. j0 + KEYS − 1 (those below n), key j at kv_row(kb, j)
// except j == new_pos (knew), handed to store(u, dot of key j0 + u) in every lane. A lane sums its
// dims d = lane + 32i in i order, then the warp reduces by a butterfly (of commutative adds, so
// every lane holds the same sums). UNROLL_D: the dims loop unrolled, so all the keys' reads are in
// flight at once (rolled, each step waits for its own round trip). j0 is a multiple of KEYS, and a
// page holds whole groups of KEYS positions (nn/kv_pages.h), so the group's rows follow row j0's.
template <bool UNROLL_D, int KEYS, bool PAGED, class Store>
__device__ __forceinline__ void score_keys(const float* qs, const KvRows& kb, const float* knew, int new_pos, int n,
                                           int j0, int D, Store store) {
  const int lane = threadIdx.x & 31;
  const float* kr[KEYS];
  key_rows<KEYS, PAGED>(kb, knew, new_pos, j0, kr);
  float acc[KEYS];
#pragma unroll
  for (int u = 0; u < KEYS; ++u) acc[u] = 0.0f;
  if constexpr (UNROLL_D) {
#pragma unroll
    for (int i = 0; i < kHeadChunks; ++i) {
      const int d = lane + 32 * i;
      if (d >= D) break;
      const float qd = qs[d];
#pragma unroll
      for (int u = 0; u < KEYS; ++u)
        if (j0 + u < n) acc[u] = fmaf(qd, kr[u][d], acc[u]);
    }
  } else {
    for (int d = lane; d < D; d += 32) {
      const float qd = qs[d];
#pragma unroll
      for (int u = 0; u < KEYS; ++u)
        if (j0 + u < n) acc[u] = fmaf(qd, kr[u][d], acc[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < KEYS; ++u) {
    const float v = warp_sum(acc[u]);
    store(u, v);
  }
}

// score_keys for the G query heads of one kv group at once (qs: [G][D]): each key's dims are read
// once and multiplied into every head's sum, each sum in score_keys' order, so every head's dot
// products are bit-identical to score_keys'. store(h, u, dot) in every lane.
template <int D, int G, int KEYS, bool PAGED, class Store>
__device__ __forceinline__ void score_keys_heads(const float* qs, const KvRows& kb, const float* knew, int new_pos,
                                                 int n, int j0, Store store) {
  const int lane = threadIdx.x & 31;
  const float* kr[KEYS];
  key_rows<KEYS, PAGED>(kb, knew, new_pos, j0, kr);
  float acc[G][KEYS];
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int u = 0; u < KEYS; ++u) acc[h][u] = 0.0f;
#pragma unroll
  for (int i = 0; i < D / 32; ++i) {
    const int d = lane + 32 * i;
    float qd[G];
#pragma unroll
    for (int h = 0; h < G; ++h) qd[h] = qs[h * D + d];
#pragma unroll
    for (int u = 0; u < KEYS; ++u)
      if (j0 + u < n) {
        const float k = kr[u][d];
#pragma unroll
        for (int h = 0; h < G; ++h) acc[h][u] = fmaf(qd[h], k, acc[h][u]);
      }
  }
#pragma unroll
  for (int h = 0; h < G; ++h)
#pragma unroll
    for (int u = 0; u < KEYS; ++u) store(h, u, warp_sum(acc[h][u]));
}

// sc[j] for j < n (score_keys): warp w scores keys w·KEYS.. in steps of warps·KEYS. The persistent
// stack's talker attention measured 1.5x faster with the dims unrolled; the per-kernel attention
// ~1 % slower. KEYS: keys per warp at a time (the small-cache kernel gives each of its warps 4 of
// 16; each key's sum is the same whichever warp forms it).
template <bool UNROLL_D, int KEYS = kKeysPerWarp, bool PAGED = false>
__device__ inline void head_scores(const float* qs, const KvRows& kb, const float* knew, int new_pos, int n, int warps,
                                   int D, float scale, bool bf16, float* sc) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int j0 = warp * KEYS; j0 < n; j0 += warps * KEYS)
    score_keys<UNROLL_D, KEYS, PAGED>(qs, kb, knew, new_pos, n, j0, D, [&](int u, float dot) {
      if (lane == 0 && j0 + u < n) sc[j0 + u] = scaled_score(dot, scale, bf16);
    });
}

// The softmax over sc[0..n), formed by one warp (every warp forms it itself, in the same order):
// the max, and the f64 denominator summed per lane over j ≡ lane (mod 32), then by a butterfly.
struct SoftmaxStats {
  float mx, inv, sum_f;
};
__device__ __forceinline__ SoftmaxStats softmax_stats(const float* sc, int n) {
  const int lane = threadIdx.x & 31;
  float mx = -__int_as_float(0x7f800000);
  for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sc[j]);
  mx = warp_max(mx);
  double sum = 0.0;
  for (int j = lane; j < n; j += 32) sum += expf(sc[j] - mx);
  sum = warp_sum(sum);
  return {mx, static_cast<float>(1.0 / sum), static_cast<float>(sum)};
}
// Key j's weight from its score.
__device__ __forceinline__ float softmax_weight(const SoftmaxStats& st, float score, bool bf16) {
  return bf16 ? round_bf16(__fdiv_rn(expf(score - st.mx), st.sum_f)) : expf(score - st.mx) * st.inv;
}

// Softmax over sc[0..n) and this warp's share of the weighted value sum: keys j ≡ warp (mod warps),
// lane l the dims l + 32i → part[warp]. UNROLL_J value rows in flight per warp; the sums run in j
// order either way, so it does not change results. The per-kernel attention uses 8 (1.7B talker 7 %
// faster than with 4); the persistent stack uses 4 (8 measured no faster there).
template <int UNROLL_J, bool PAGED = false>
__device__ inline void head_values(const float* sc, int n, const KvRows& vb, const float* vnew, int new_pos, int warps,
                                   int D, bool bf16, float* part) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const SoftmaxStats st = softmax_stats(sc, n);
  float acc[kHeadChunks];
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) acc[i] = 0.0f;
#pragma unroll UNROLL_J
  for (int j = warp; j < n; j += warps) {
    const float pj = softmax_weight(st, sc[j], bf16);
    const float* row = kv_row_warp<PAGED>(vb, j);
    const float* vr = j == new_pos ? vnew : row;
#pragma unroll
    for (int i = 0; i < kHeadChunks; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = fmaf(pj, vr[d], acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kHeadChunks; ++i) {
    const int d = lane + 32 * i;
    if (d < D) part[warp * D + d] = acc[i];
  }
}

// o[d] = Σ over warps of part (in warp order), by all `threads` threads of the block.
__device__ inline void head_output(const float* part, int warps, int D, int threads, bool bf16, float* o) {
  for (int d = threadIdx.x; d < D; d += threads) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += part[w * D + d];
    o[d] = bf16 ? round_bf16(total) : total;
  }
}

}  // namespace chorus::cuda::dev
