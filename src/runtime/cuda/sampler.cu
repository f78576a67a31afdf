// The sampler on the device, one block per row, reproducing sampling::sample step by step:
// rules (repetition penalty, masks), then greedy argmax or temperature → top-k (the k-th largest
// scaled logit by a binned select, ties kept) → f64 weights → top-p → inverse CDF over the kept ids in
// ascending id order with the same Philox4x32-10 draw. The order-dependent f64 sums run on one
// thread over the compacted kept ids, in the CPU's order, so the chosen id is the CPU's up to f64
// exp rounding.
#include <cstdint>
#include <string>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kMaxThreads = 576;  // 4 ids per thread up to 2304 (Breeze's 2051: 17 warps, not 9 of 8 ids)

__device__ __forceinline__ void philox(uint32_t (&c)[4], uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
}

__device__ __forceinline__ double uniform53(uint32_t seed_lo, uint32_t seed_hi, uint32_t stream, uint32_t frame,
                                            uint32_t codebook) {
  uint32_t c[4] = {frame, codebook, stream, 0u};
  philox(c, seed_lo, seed_hi);
  const uint64_t bits = ((static_cast<uint64_t>(c[0]) << 32) | c[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

__global__ void uniform_kernel(uint64_t seed, uint32_t stream, uint32_t frame, uint32_t cb0, int n, double* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = uniform53(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), stream, frame, cb0 + i);
}

constexpr float kNegInf = -__builtin_huge_valf();

// Order-preserving map of a float onto unsigned (larger float → larger key); −0 is folded onto +0
// because the CPU compares values, not bit patterns.
__device__ __forceinline__ uint32_t order_key(float v) {
  uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kSmemKept = 1024;  // kept ids listed in shared memory; more go to the global scratch

// One warp's share of the block-wide reductions of step 2 (validity counts, largest value and its
// first id), combined by every thread after a single barrier.
struct WarpPartial {
  int packed;  // 65536 · (NaN or +inf values) + finite values
  float best;
  int best_i;
  float sum;  // of the finite values (the binned select's bin width; any order will do)
};

// (value, id) of the larger value, the smaller id among equals: argmax keeping the first id.
__device__ __forceinline__ void keep_best(float& best, int& best_i, float v, int i) {
  if (v > best || (v == best && i < best_i)) {
    best = v;
    best_i = i;
  }
}

// Sums the counts and keeps the largest value with its first id over the warp's lanes (the order
// does not matter: keep_best picks the same pair in any order).
__device__ __forceinline__ void reduce_partial(WarpPartial& q) {
  for (int o = 16; o > 0; o >>= 1) {
    q.packed += __shfl_xor_sync(0xffffffffu, q.packed, o);
    q.sum += __shfl_xor_sync(0xffffffffu, q.sum, o);
    keep_best(q.best, q.best_i, __shfl_xor_sync(0xffffffffu, q.best, o), __shfl_xor_sync(0xffffffffu, q.best_i, o));
  }
}

// In a 256-bin histogram whose higher bins hold larger values: the bin holding the remaining-th
// largest value, the count in the bins above it and the bin's size. Every warp finds it itself:
// lane l holds bins 255−8l down to 248−8l (two 16-byte loads, walked in registers).
struct BinPick {
  int bin;
  uint32_t above, size;
};
__device__ __forceinline__ BinPick pick_bin(const unsigned* h, uint32_t remaining, int lane) {
  const uint4 upper = *reinterpret_cast<const uint4*>(&h[252 - 8 * lane]);
  const uint4 lower = *reinterpret_cast<const uint4*>(&h[248 - 8 * lane]);
  const uint32_t bins[8] = {upper.w, upper.z, upper.y, upper.x, lower.w, lower.z, lower.y, lower.x};
  uint32_t local = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) local += bins[i];
  uint32_t incl = local;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  const int holder = __ffs(__ballot_sync(0xffffffffu, incl - local < remaining && remaining <= incl)) - 1;
  // In the holder: the first of its bins that reaches `remaining`, the count above it and its size.
  uint32_t cum = incl - local, size = bins[7];
  int pick = 7;
  bool picked = false;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    if (!picked && cum + bins[i] >= remaining) {
      pick = i;
      size = bins[i];
      picked = true;
    }
    if (!picked) cum += bins[i];
  }
  return {__shfl_sync(0xffffffffu, 255 - 8 * lane - pick, holder), __shfl_sync(0xffffffffu, cum, holder),
          __shfl_sync(0xffffffffu, size, holder)};
}

// Bins measured down from the largest value `top`, 1/inv_width wide: bin 255 holds the values
// within one width of it, bin 0 everything from 255 widths below. Monotone in the value (a larger
// value never lands in a lower bin), so whole bins are ordered, and equal values share a bin.
__device__ __forceinline__ int bin_below_top(float x, float top, float inv_width) {
  const float d = (top - x) * inv_width;
  return d < 255.0f ? 255 - static_cast<int>(d) : 0;
}

constexpr int kRankedBin = 32;  // a bin of at most this many values is ranked by one warp

struct SelectShared {
  unsigned hist[5][256];  // the binned pass, then one per radix pass, so no pass waits for a clear
  float bin_values[kRankedBin];
  int bin_count;
};

// Top-k: drops (sets to −inf) every value below the k-th largest of the finite values v (ties with
// it kept). One histogram pass over bins measured from the largest value, the bin width 1/64 of
// its distance to the mean, usually leaves the k-th largest in a bin of a few values; one warp
// ranks those. A bin of more than kRankedBin values falls back to a radix select over the order
// keys of that bin's values, 8 bits a pass, ending early when every value of the key bin is kept.
// The finite values' count, largest value and sum: `finite`, `top`, `sum`. Before the first
// barrier of the kernel, hist must be zero and bin_count 0.
template <int kPer>
__device__ __forceinline__ void select_top_k(float (&v)[kPer], int k, int finite, float top, float sum,
                                             SelectShared& sh, int lane) {
  const float spread = top - sum / static_cast<float>(finite);
  const float inv_width = spread > 0.0f && 64.0f / spread < -kNegInf ? 64.0f / spread : 0.0f;
  int bins[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    bins[j] = bin_below_top(v[j], top, inv_width);
    if (v[j] != kNegInf) atomicAdd(&sh.hist[0][bins[j]], 1u);
  }
  __syncthreads();
  uint32_t remaining = static_cast<uint32_t>(k);
  const BinPick at = pick_bin(sh.hist[0], remaining, lane);
  remaining -= at.above;
  if (at.size == remaining) {  // the bin is kept whole
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (bins[j] < at.bin) v[j] = kNegInf;
    return;
  }
  if (at.size <= kRankedBin) {
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (v[j] != kNegInf && bins[j] == at.bin) sh.bin_values[atomicAdd(&sh.bin_count, 1)] = v[j];
    __syncthreads();
    // Lane i ranks value i of the bin; the k-th largest is the one with fewer than `remaining`
    // values above it and at least `remaining` at or above it (any of its equals will do).
    const int n = static_cast<int>(at.size);
    const float x = lane < n ? sh.bin_values[lane] : kNegInf;
    uint32_t above = 0, at_or_above = 0;
    for (int i = 0; i < n; ++i) {
      const float y = sh.bin_values[i];
      above += y > x;
      at_or_above += y >= x;
    }
    const unsigned kth = __ballot_sync(0xffffffffu, lane < n && above < remaining && remaining <= at_or_above);
    const float threshold = __shfl_sync(0xffffffffu, x, __ffs(kth) - 1);
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (v[j] < threshold) v[j] = kNegInf;
    return;
  }
  uint32_t prefix = 0, mask = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    unsigned* h = sh.hist[1 + pass];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (v[j] == kNegInf || bins[j] != at.bin) continue;
      const uint32_t key = order_key(v[j]);
      if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    const BinPick pk = pick_bin(h, remaining, lane);
    remaining -= pk.above;
    prefix |= static_cast<uint32_t>(pk.bin) << shift;
    mask |= 255u << shift;
    if (pk.size == remaining) break;
  }
  // The key threshold decides for every bin: higher bins hold larger values than the kept ones,
  // and a lower bin's values lie below every value of bin at.bin, the dropped ones included.
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (v[j] != kNegInf && order_key(v[j]) < prefix) v[j] = kNegInf;
}

// Barriers are the sampler's cost (one block, a chain of block-wide steps per row), so each
// block-wide step takes one: partials go to shared memory and every thread combines them itself.
// Thread t owns ids [kPer·t, kPer·t + kPer); the block has just enough warps for the vocabulary.
template <int kPer>
__global__ void __launch_bounds__(kMaxThreads, 1) sample_kernel(SampleArgs a) {
  __shared__ WarpPartial partial[32];
  __shared__ int warp_kept[32];
  __shared__ __align__(16) SelectShared select;
  __shared__ int sh_choice;
  __shared__ double s_w[kSmemKept];
  __shared__ int s_id[kSmemKept], s_sorted[kSmemKept];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  for (int i = tid; i < 5 * 256; i += blockDim.x) select.hist[i >> 8][i & 255] = 0;
  if (tid == 0) select.bin_count = 0;
  dev::pdl_wait();
  const int r = blockIdx.x;
  const int V = a.vocab;
  const int i0 = tid * kPer;
  const float* l = a.logits + static_cast<int64_t>(r) * a.ld;
  const DeviceSampler p = a.params[r];
  const int frame = a.frame ? a.frame[r] + a.frame_offset : a.frame_offset;
  // The draw does not depend on the logits: the last thread makes it while the loads are in flight
  // (step 8 reads it after the barriers between).
  const bool greedy = p.greedy || p.temperature == 0.0f;
  __shared__ double s_u;
  if (tid == blockDim.x - 1 && !greedy)
    s_u = uniform53(p.seed_lo, p.seed_hi, p.rng_stream, static_cast<uint32_t>(frame), a.codebook);
  float v[kPer];
  unsigned flagged = 0;  // bit j: id i0 + j has the repetition penalty
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    v[j] = i0 + j < V ? l[i0 + j] : kNegInf;
    if (a.penalized && i0 + j < V && a.penalized[static_cast<int64_t>(r) * V + i0 + j]) flagged |= 1u << j;
  }

  // 1. Rules (sampling::apply_rules).
  if (a.penalized || a.allowed_below >= 0 || a.blocked_id >= 0) {
    const bool block_now = a.blocked_id >= 0 && (!a.block_until_frame || frame < a.block_until_frame[r]);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = i0 + j;
      if (i >= V) continue;
      float x = v[j];
      if ((flagged >> j & 1u) && p.repetition_penalty != 1.0f) x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
      if (block_now && i == a.blocked_id) x = kNegInf;
      if (a.allowed_below >= 0 && i >= a.allowed_below && i != a.also_allowed) x = kNegInf;
      v[j] = x;
    }
  }
  // 2. Validity (no NaN / +inf, at least one finite logit), and the largest value: of the logits
  // for greedy (with its first id), of the scaled logits otherwise (step 3, temperature, comes
  // first; division by a positive number keeps the order, so this is the CPU's max after top-k).
  WarpPartial mine{0, kNegInf, V, 0.0f};
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (i0 + j >= V) continue;
    mine.packed += (isnan(v[j]) || v[j] == -kNegInf ? 65536 : 0) + (v[j] != kNegInf ? 1 : 0);
    if (!greedy) v[j] = v[j] / p.temperature;
    if (!isnan(v[j])) keep_best(mine.best, mine.best_i, v[j], i0 + j);
    if (!greedy && v[j] != kNegInf) mine.sum += v[j];
  }
  reduce_partial(mine);
  if (lane == 0) partial[warp] = mine;
  __syncthreads();
  // Lane w takes warp w's partial, so the combination is one more butterfly, not a loop over warps.
  WarpPartial all = lane < warps ? partial[lane] : WarpPartial{0, kNegInf, V, 0.0f};
  reduce_partial(all);
  const int finite = all.packed & 65535, bad = all.packed >> 16;
  if (bad || finite == 0) {
    if (tid == 0) {
      if (a.error) a.error[r] = bad ? kSampleNonFinite : kSampleAllMasked;
      a.out[static_cast<int64_t>(r) * a.out_stride] = 0;
    }
    return;
  }

  int choice = all.best_i;  // greedy: the first id of the largest logit
  if (!greedy) {
    // 4. Top-k. Every thread must bin with the same width: each warp combined the same partials by
    // the same butterfly, and every thread takes its lane 0's sum, so they all hold one value.
    if (p.top_k > 0 && p.top_k < finite)
      select_top_k(v, p.top_k, finite, all.best, __shfl_sync(0xffffffffu, all.sum, 0), select, lane);
    // 5. The top-k survivors (finite scaled logits) in ascending id order (threads own contiguous
    // ids), in shared memory when they fit: a warp scan, then each warp adds the counts of the
    // warps before it. Their f64 values go in first and become weights in place (6), so only the
    // ~k survivors pay for the f64 exponential, not every id of every warp.
    int count = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) count += v[j] != kNegInf;
    int incl = count;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) warp_kept[warp] = incl;
    __syncthreads();
    const int other = lane < warps ? warp_kept[lane] : 0;
    const int kept = dev::warp_sum(other);
    int off = incl - count + dev::warp_sum(lane < warp ? other : 0);
    const bool in_smem = kept <= kSmemKept;
    double* cw = in_smem ? s_w : a.scratch_w + static_cast<int64_t>(r) * V;
    int32_t* cid = in_smem ? s_id : a.scratch_ids + static_cast<int64_t>(r) * 2 * V;
    int32_t* sorted = in_smem ? s_sorted : cid + V;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (v[j] != kNegInf) {
        cw[off] = static_cast<double>(v[j]);
        cid[off] = i0 + j;
        ++off;
      }
    __syncthreads();
    // 6. Weights w = exp(f64(s) − f64(max s)), in place. A weight that underflows to 0 stays in the
    // list, where the CPU leaves that id out: a zero adds nothing to the sums below, top-p ranks it
    // last, and the draw takes the first running sum above its target, so it is never chosen.
    const double mx = static_cast<double>(all.best);
    for (int e = tid; e < kept; e += blockDim.x) cw[e] = exp(cw[e] - mx);
    __syncthreads();
    // 7. Top-p: rank the kept ids by (w descending, id ascending), keep the fewest reaching top_p·Σw.
    if (p.top_p < 1.0f) {
      for (int e = tid; e < kept; e += blockDim.x) {
        const double we = cw[e];
        int rank = 0;
        for (int f = 0; f < kept; ++f) rank += cw[f] > we || (cw[f] == we && f < e);
        sorted[rank] = e;
      }
      __syncthreads();
      if (tid == 0) {
        double total = 0.0;
        for (int e = 0; e < kept; ++e) total += cw[e];
        const double need = static_cast<double>(p.top_p) * total;
        double cum = 0.0;
        int keep = 0;
        while (keep < kept && (keep == 0 || cum < need)) cum += cw[sorted[keep++]];
        for (int j = keep; j < kept; ++j) cw[sorted[j]] = 0.0;
      }
      __syncthreads();
    }
    // 8. Inverse CDF in ascending id order, with the CPU's sequential f64 sums in one pass: the
    // running sums replace the weights (adding a zero weight leaves a sum unchanged, so they equal
    // the CPU's sums at every kept id), the total is the last, and the chosen id is the first whose
    // running sum exceeds the target (a binary search: the sums never decrease).
    if (tid == 0) {
      const double u = s_u;
      double cum = 0.0;
      int last = -1;
#pragma unroll 4
      for (int e = 0; e < kept; ++e) {
        const double we = cw[e];
        if (we > 0.0) last = e;
        cum += we;
        cw[e] = cum;
      }
      const double target = u * cum;
      int lo = 0, hi = kept;  // the first e with cw[e] > target lies in [lo, hi]
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (cw[mid] > target) hi = mid;
        else lo = mid + 1;
      }
      sh_choice = lo < kept ? cid[lo] : (last >= 0 ? cid[last] : -1);
    }
    __syncthreads();
    choice = sh_choice;
  }
  const int c = choice;
  if (tid == 0) {
    a.out[static_cast<int64_t>(r) * a.out_stride] = c;
    if (a.mark_chosen && c >= 0 && c < V) a.mark_chosen[static_cast<int64_t>(r) * V + c] = 1;
  }
  if (a.embed_table && c >= 0 && c < V)
    for (int64_t d = tid; d < a.embed_dim; d += blockDim.x)
      a.embed_out[r * a.embed_dim + d] = dev::bf16_bits_to_f32(a.embed_table[static_cast<int64_t>(c) * a.embed_dim + d]);
  if (a.embed_table_f32 && c >= 0 && c < V)
    for (int64_t d = tid; d < a.embed_dim; d += blockDim.x) {
      const float v = a.embed_table_f32[static_cast<int64_t>(c) * a.embed_dim + d];
      a.embed_out[r * a.embed_dim + d] = a.embed_round_bf16 ? dev::round_bf16(v) : v;
    }
}

}  // namespace

Status sample(const SampleArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return ok_status();
  if (!a.logits || !a.params || !a.out || a.vocab <= 0 || a.ld < a.vocab)
    return make_error(ErrorCode::kInternal, "cuda sample: incomplete arguments");
  if (!a.scratch_w || !a.scratch_ids) return make_error(ErrorCode::kInternal, "cuda sample: no scratch");
  if (a.vocab > kMaxThreads * 8)
    return make_error(ErrorCode::kUnsupported, "cuda sample: vocabulary above " + std::to_string(kMaxThreads * 8));
  // Whole warps of 4 ids per thread (8 above 2304 ids); at most 576 threads, so no register spills.
  const dim3 rows(static_cast<unsigned>(a.rows));
  const auto threads = [&](int per_thread) { return dim3((a.vocab + 32 * per_thread - 1) / (32 * per_thread) * 32); };
  if (a.vocab <= kMaxThreads * 4)
    CHORUS_CUDA_TRY(launch(sample_kernel<4>, rows, threads(4), 0, s, a));
  else
    CHORUS_CUDA_TRY(launch(sample_kernel<8>, rows, threads(8), 0, s, a));
  return ok_status();
}

Status uniform53_batch(uint64_t seed, uint32_t stream, uint32_t frame, uint32_t codebook0, int n, double* out,
                       cudaStream_t s) {
  if (n <= 0) return ok_status();
  uniform_kernel<<<(n + 255) / 256, 256, 0, s>>>(seed, stream, frame, codebook0, n, out);
  CHORUS_CUDA_LAUNCHED("uniform_kernel");
  return ok_status();
}

}  // namespace chorus::cuda
