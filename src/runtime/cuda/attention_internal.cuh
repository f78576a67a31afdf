// What the attention kernels of attention.cu and attention_rows.cu share: their parameters, the
// cache rows of a sequence, the L2 prefetch of its earlier keys and values, and the many-row
// kernels' entry points (attention_rows.cu), which attention.cu's dispatch calls.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "runtime/cuda/attend_head.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

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

// Long caches (more than dev::kSmallContext positions) are attended with this many warps per head
// by the general and cluster kernels: the value sums' 16 sets.
constexpr int kLongWarps = 16;

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

// The many-row kernels (attention_rows.cu). rows_attention_for: which of them takes a call of
// `rows` rows (row_attention_variant' numbers; 0: none, the cluster or general kernel does);
// launch_many_rows: that one; reserve_rows_attention: their shared memory for caches of up to
// `capacity` positions (attention_reserve calls it).
int rows_attention_for(const AttnParams& p, int64_t rows);
cudaError_t launch_many_rows(bool fused, const AttnParams& p, int64_t rows, int variant, cudaStream_t s);
Status reserve_rows_attention(int64_t capacity, int64_t head_dim);

}  // namespace chorus::cuda
