// The sampler on the device, one block per row, reproducing sampling::sample step by step:
// rules (repetition penalty, masks), then greedy argmax or temperature → top-k (radix select of the
// k-th largest scaled logit, ties kept) → f64 weights → top-p → inverse CDF over the kept ids in
// ascending id order with the same Philox4x32-10 draw. The order-dependent f64 sums run on one
// thread over the compacted kept ids, in the CPU's order, so the chosen id is the CPU's up to f64
// exp rounding.
#include <cstdint>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kThreads = 1024;

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

// Exclusive prefix sum of one count per thread (block of kThreads); returns the total via *total.
__device__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sums[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;  // inclusive
  }
  __syncthreads();
  *total = warp_sums[31];
  return x - v + (warp > 0 ? warp_sums[warp - 1] : 0);
}

constexpr int kPer = 4;          // ids per thread (contiguous): vocabularies up to kThreads·kPer
constexpr int kSmemKept = 1024;  // kept ids listed in shared memory; more go to the global scratch

// Block-wide argmax-free helpers keep every value in registers: thread t owns ids [kPer·t, kPer·t + kPer).
__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ float fscratch[32];
  __shared__ int iscratch[32];
  __shared__ unsigned hist[256];
  __shared__ unsigned sh_prefix, sh_remaining;
  __shared__ int sh_choice;
  __shared__ double s_w[kSmemKept];
  __shared__ int s_id[kSmemKept], s_sorted[kSmemKept];
  dev::pdl_wait();
  const int r = blockIdx.x;
  const int V = a.vocab;
  const int tid = threadIdx.x;
  const int i0 = tid * kPer;
  const float* l = a.logits + static_cast<int64_t>(r) * a.ld;
  const DeviceSampler p = a.params[r];
  const int frame = a.frame ? a.frame[r] + a.frame_offset : a.frame_offset;
  float v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) v[j] = i0 + j < V ? l[i0 + j] : kNegInf;

  // 1. Rules (sampling::apply_rules).
  if (a.penalized || a.allowed_below >= 0 || a.blocked_id >= 0) {
    const bool block_now = a.blocked_id >= 0 && (!a.block_until_frame || frame < a.block_until_frame[r]);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = i0 + j;
      if (i >= V) continue;
      float x = v[j];
      if (a.penalized && p.repetition_penalty != 1.0f && a.penalized[static_cast<int64_t>(r) * V + i])
        x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
      if (block_now && i == a.blocked_id) x = kNegInf;
      if (a.allowed_below >= 0 && i >= a.allowed_below && i != a.also_allowed) x = kNegInf;
      v[j] = x;
    }
  }
  // 2. Validity: no NaN / +inf, at least one finite logit (both counts in one reduction).
  int packed = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (i0 + j < V) packed += (isnan(v[j]) || v[j] == -kNegInf ? 65536 : 0) + (v[j] != kNegInf ? 1 : 0);
  packed = dev::block_sum(packed, iscratch);
  const int finite = packed & 65535, bad = packed >> 16;
  if (bad || finite == 0) {
    if (tid == 0) {
      if (a.error) a.error[r] = bad ? kSampleNonFinite : kSampleAllMasked;
      a.out[static_cast<int64_t>(r) * a.out_stride] = 0;
    }
    return;
  }

  if (p.greedy || p.temperature == 0.0f) {  // first id of the largest logit
    float best = kNegInf;
    int best_i = V;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (i0 + j < V && (v[j] > best || best_i == V)) {
        best = v[j];
        best_i = i0 + j;
      }
    const float mx = dev::block_max(best, fscratch);
    int cand = best == mx ? best_i : V;
    for (int o = 16; o > 0; o >>= 1) cand = min(cand, __shfl_xor_sync(0xffffffffu, cand, o));
    if ((tid & 31) == 0) iscratch[tid >> 5] = cand;
    __syncthreads();
    if (tid < 32) {
      int c = iscratch[tid];
      for (int o = 16; o > 0; o >>= 1) c = min(c, __shfl_xor_sync(0xffffffffu, c, o));
      if (tid == 0) sh_choice = c;
    }
    __syncthreads();
  } else {
    // 3. Temperature.
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[j] = v[j] / p.temperature;
    // 4. Top-k: the k-th largest finite value by radix select over order keys, 8 bits at a time.
    if (p.top_k > 0 && p.top_k < finite) {
      uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(p.top_k);
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kThreads) hist[i] = 0;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          if (v[j] == kNegInf) continue;
          const uint32_t key = order_key(v[j]);
          if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid < 32) {  // the bin holding the remaining-th largest: lane l scans bins 255−8l down to 248−8l
          uint32_t local = 0;
          for (int i = 0; i < 8; ++i) local += hist[255 - 8 * tid - i];
          uint32_t incl = local;
          for (int o = 1; o < 32; o <<= 1) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
            if (tid >= o) incl += y;
          }
          uint32_t cum = incl - local;
          if (cum < remaining && remaining <= incl) {
            int b = 255 - 8 * tid;
            for (int i = 0; i < 7; ++i, --b) {
              if (cum + hist[b] >= remaining) break;
              cum += hist[b];
            }
            sh_remaining = remaining - cum;
            sh_prefix = prefix | (static_cast<uint32_t>(b) << shift);
          }
        }
        __syncthreads();
        prefix = sh_prefix;
        remaining = sh_remaining;
        mask |= 255u << shift;
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        if (v[j] != kNegInf && order_key(v[j]) < prefix) v[j] = kNegInf;
    }
    // 5. Weights w = exp(f64(s) − f64(max s)).
    float mx = kNegInf;
#pragma unroll
    for (int j = 0; j < kPer; ++j) mx = fmaxf(mx, v[j]);
    mx = dev::block_max(mx, fscratch);
    double w[kPer];
    int mine = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      w[j] = v[j] != kNegInf ? exp(static_cast<double>(v[j]) - static_cast<double>(mx)) : 0.0;
      mine += w[j] > 0.0;
    }
    // 6. The ids with w > 0 in ascending order (threads own contiguous ids), in shared memory when
    // they fit.
    int kept = 0;
    int off = block_exclusive_scan(mine, iscratch, &kept);
    const bool in_smem = kept <= kSmemKept;
    double* cw = in_smem ? s_w : a.scratch_w + static_cast<int64_t>(r) * V;
    int32_t* cid = in_smem ? s_id : a.scratch_ids + static_cast<int64_t>(r) * 2 * V;
    int32_t* sorted = in_smem ? s_sorted : cid + V;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (w[j] > 0.0) {
        cw[off] = w[j];
        cid[off] = i0 + j;
        ++off;
      }
    __syncthreads();
    // 7. Top-p: rank the kept ids by (w descending, id ascending), keep the fewest reaching top_p·Σw.
    if (p.top_p < 1.0f) {
      for (int e = tid; e < kept; e += kThreads) {
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
    // 8. Inverse CDF in ascending id order (sequential f64 sums, as the CPU).
    if (tid == 0) {
      double total = 0.0;
      for (int e = 0; e < kept; ++e) total += cw[e];
      const double target =
          uniform53(p.seed_lo, p.seed_hi, p.rng_stream, static_cast<uint32_t>(frame), a.codebook) * total;
      double cum = 0.0;
      int last = -1, choice = -1;
      for (int e = 0; e < kept; ++e) {
        const double we = cw[e];
        if (we <= 0.0) continue;
        cum += we;
        last = cid[e];
        if (cum > target) {
          choice = last;
          break;
        }
      }
      sh_choice = choice >= 0 ? choice : last;
    }
    __syncthreads();
  }
  const int c = sh_choice;
  if (tid == 0) {
    a.out[static_cast<int64_t>(r) * a.out_stride] = c;
    if (a.mark_chosen && c >= 0 && c < V) a.mark_chosen[static_cast<int64_t>(r) * V + c] = 1;
  }
  if (a.embed_table && c >= 0 && c < V)
    for (int64_t d = tid; d < a.embed_dim; d += kThreads)
      a.embed_out[r * a.embed_dim + d] = dev::bf16_bits_to_f32(a.embed_table[static_cast<int64_t>(c) * a.embed_dim + d]);
  if (a.embed_table_f32 && c >= 0 && c < V)
    for (int64_t d = tid; d < a.embed_dim; d += kThreads) {
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
  if (a.vocab > kThreads * kPer) return make_error(ErrorCode::kUnsupported, "cuda sample: vocabulary above 4096");
  CHORUS_CUDA_TRY(launch(sample_kernel, dim3(static_cast<unsigned>(a.rows)), dim3(kThreads), 0, s, a));
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
