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

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ float fscratch[32];
  __shared__ int iscratch[32];
  __shared__ unsigned hist[256];
  __shared__ unsigned sh_prefix, sh_remaining;
  __shared__ int sh_choice;
  dev::pdl_wait();
  const int r = blockIdx.x;
  const int V = a.vocab;
  const int tid = threadIdx.x;
  float* l = a.logits + static_cast<int64_t>(r) * a.ld;
  const DeviceSampler p = a.params[r];
  const int frame = a.frame ? a.frame[r] + a.frame_offset : a.frame_offset;

  // 1. Rules (sampling::apply_rules).
  const bool rules = a.penalized || a.allowed_below >= 0 || a.blocked_id >= 0;
  if (rules) {
    const bool block_now = a.blocked_id >= 0 && (!a.block_until_frame || frame < a.block_until_frame[r]);
    for (int i = tid; i < V; i += kThreads) {
      float v = l[i];
      if (a.penalized && p.repetition_penalty != 1.0f && a.penalized[static_cast<int64_t>(r) * V + i])
        v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
      if (block_now && i == a.blocked_id) v = kNegInf;
      if (a.allowed_below >= 0 && i >= a.allowed_below && i != a.also_allowed) v = kNegInf;
      l[i] = v;
    }
  }
  // 2. Validity: no NaN / +inf, at least one finite logit.
  int bad = 0, finite = 0;
  for (int i = tid; i < V; i += kThreads) {
    const float v = l[i];
    if (isnan(v) || v == -kNegInf) bad = 1;
    finite += v != kNegInf;
  }
  bad = dev::block_sum(bad, iscratch);
  finite = dev::block_sum(finite, iscratch);
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
    for (int i = tid; i < V; i += kThreads) {
      const float v = l[i];
      if (v > best || (v == best && best_i == V)) {
        best = v;
        best_i = i;
      }
    }
    const float mx = dev::block_max(best, fscratch);
    int cand = best == mx ? best_i : V;
    for (int o = 16; o > 0; o >>= 1) cand = min(cand, __shfl_xor_sync(0xffffffffu, cand, o));
    __syncthreads();
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
    for (int i = tid; i < V; i += kThreads) l[i] = l[i] / p.temperature;
    __syncthreads();
    // 4. Top-k: the k-th largest finite value by radix select over order keys, 8 bits at a time.
    if (p.top_k > 0 && p.top_k < finite) {
      uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(p.top_k);
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += kThreads) hist[i] = 0;
        __syncthreads();
        for (int i = tid; i < V; i += kThreads) {
          const float v = l[i];
          if (v == kNegInf) continue;
          const uint32_t key = order_key(v);
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
        __syncthreads();
      }
      for (int i = tid; i < V; i += kThreads)
        if (l[i] != kNegInf && order_key(l[i]) < prefix) l[i] = kNegInf;
      __syncthreads();
    }
    // 5. Weights w = exp(f64(s) − f64(max s)).
    float mx = kNegInf;
    for (int i = tid; i < V; i += kThreads) mx = fmaxf(mx, l[i]);
    mx = dev::block_max(mx, fscratch);
    double* w = a.scratch_w + static_cast<int64_t>(r) * V;
    for (int i = tid; i < V; i += kThreads)
      w[i] = l[i] != kNegInf ? exp(static_cast<double>(l[i]) - static_cast<double>(mx)) : 0.0;
    __syncthreads();
    // 6. Compact the ids with w > 0 in ascending order (each thread owns a contiguous chunk).
    int32_t* ids = a.scratch_ids + static_cast<int64_t>(r) * 2 * V;
    const int chunk = (V + kThreads - 1) / kThreads;
    const int lo = min(V, tid * chunk), hi = min(V, lo + chunk);
    int mine = 0;
    for (int i = lo; i < hi; ++i) mine += w[i] > 0.0;
    int kept = 0;
    int off = block_exclusive_scan(mine, iscratch, &kept);
    for (int i = lo; i < hi; ++i)
      if (w[i] > 0.0) ids[off++] = i;
    __syncthreads();
    // 7. Top-p: rank the kept ids by (w descending, id ascending), keep the fewest reaching top_p·Σw.
    if (p.top_p < 1.0f) {
      int32_t* sorted = ids + V;
      for (int e = tid; e < kept; e += kThreads) {
        const double we = w[ids[e]];
        const int ie = ids[e];
        int rank = 0;
        for (int f = 0; f < kept; ++f) {
          const double wf = w[ids[f]];
          rank += wf > we || (wf == we && ids[f] < ie);
        }
        sorted[rank] = ie;
      }
      __syncthreads();
      if (tid == 0) {
        double total = 0.0;
        for (int e = 0; e < kept; ++e) total += w[ids[e]];
        const double need = static_cast<double>(p.top_p) * total;
        double cum = 0.0;
        int keep = 0;
        while (keep < kept && (keep == 0 || cum < need)) cum += w[sorted[keep++]];
        for (int j = keep; j < kept; ++j) w[sorted[j]] = 0.0;
      }
      __syncthreads();
    }
    // 8. Inverse CDF in ascending id order.
    if (tid == 0) {
      double total = 0.0;
      for (int e = 0; e < kept; ++e) total += w[ids[e]];
      const double target =
          uniform53(p.seed_lo, p.seed_hi, p.rng_stream, static_cast<uint32_t>(frame), a.codebook) * total;
      double cum = 0.0;
      int last = -1, choice = -1;
      for (int e = 0; e < kept; ++e) {
        const double we = w[ids[e]];
        if (we <= 0.0) continue;
        cum += we;
        last = ids[e];
        if (cum > target) {
          choice = last;
          break;
        }
      }
      sh_choice = choice >= 0 ? choice : last;
    }
    __syncthreads();
  }
  if (tid == 0) {
    const int c = sh_choice;
    a.out[static_cast<int64_t>(r) * a.out_stride] = c;
    if (a.mark_chosen && c >= 0 && c < V) a.mark_chosen[static_cast<int64_t>(r) * V + c] = 1;
  }
}

}  // namespace

Status sample(const SampleArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return ok_status();
  if (!a.logits || !a.params || !a.out || a.vocab <= 0 || a.ld < a.vocab)
    return make_error(ErrorCode::kInternal, "cuda sample: incomplete arguments");
  if (!a.scratch_w || !a.scratch_ids) return make_error(ErrorCode::kInternal, "cuda sample: no scratch");
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
