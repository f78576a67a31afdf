// The persistent single-row decoder stack (decode_stack.h). One 512-thread block per SM, launched
// cooperatively so all blocks are resident; warp w of block b is global warp b·16 + w.
//
// Matrix phases: feature f goes to global warp f mod W (W = all warps); a lane reads 16 bytes
// (8 bf16) of the row per chunk, chunk i covering k = 8·lane + 256·i, summed in i order and then
// over lanes by a butterfly: the order of cuda::linear's single-row kernel, so the results are
// bit-identical. The phase input is staged once per block in shared memory (RMS-normed there when
// the phase has a norm), read through L2 because other blocks wrote it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/head_norm_rope.cuh"

namespace chorus::cuda {

namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
constexpr int kPre = 8;              // 16-byte weight chunks per lane loaded before a barrier
constexpr int kMaxDimChunks = 8;     // head_dim <= 256
constexpr int kKeysPerWarp = 8;      // as attention.cu
constexpr int kSmallContext = 64;    // attention.cu: contexts up to this use 4 warps, longer 16

// The rows of one matrix phase: up to three stacked matrices (q, k, v), or gate and up (NW = 2).
struct Mat {
  const uint16_t* w[3];
  int64_t n0, n1;  // rows of w[0] and w[1] (NW = 1 segments)
  int64_t F, K;    // features, input width (a multiple of 256)
};

template <int NW>
__device__ __forceinline__ const uint16_t* row_ptr(const Mat& m, int64_t f, int r) {
  if constexpr (NW == 2) return m.w[r] + f * m.K;
  if (f < m.n0) return m.w[0] + f * m.K;
  if (f < m.n0 + m.n1) return m.w[1] + (f - m.n0) * m.K;
  return m.w[2] + (f - m.n0 - m.n1) * m.K;
}

// The first kPre / NW chunk steps of this warp's share of `m`, into registers.
template <int NW>
__device__ __forceinline__ void prefetch(const Mat& m, int gw, int W, uint4 (&pre)[kPre]) {
  const int lane = threadIdx.x & 31;
  const int C = static_cast<int>(m.K / 256);
#pragma unroll
  for (int t = 0; t < kPre / NW; ++t) {
    const int fi = t / C, i = t % C;
    const int64_t f = gw + static_cast<int64_t>(fi) * W;
    if (f < m.F)
#pragma unroll
      for (int r = 0; r < NW; ++r) pre[t * NW + r] = dev::load_weights(row_ptr<NW>(m, f, r) + lane * 8 + 256 * i);
  }
}

// x (written by other blocks) → xs in shared memory, RMS-normed with `g` when given: the sum of
// squares as cuda::linear's single-row kernel forms it (lane-strided float4s in f64, one warp).
template <bool BF16>
__device__ void stage(const float* x, int64_t K, const float* g, float eps, float* xs, float* inv_s) {
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
  for (int64_t k = threadIdx.x; k < K; k += kThreads)
    xs[k] = BF16 ? dev::norm_bf16(xs[k], inv, g[k]) : __fmul_rn(__fmul_rn(xs[k], inv), g[k]);
  __syncthreads();
}

// EPI 0: y[f] = v; 1: y[f] += v (residual); 2: y[f] = SwiGLU(gate, up). bf16 rounding as linear.cu.
template <int NW, int EPI, bool BF16>
__device__ void gemv_phase(const Mat& m, const float* xs, const uint4 (&pre)[kPre], int gw, int W, float* y) {
  const int lane = threadIdx.x & 31;
  const int C = static_cast<int>(m.K / 256);
  constexpr int P = kPre / NW;
  int fi = 0;
  for (int64_t f = gw; f < m.F; f += W, ++fi) {
    const uint16_t* w[NW];
#pragma unroll
    for (int r = 0; r < NW; ++r) w[r] = row_ptr<NW>(m, f, r);
    float acc[NW];
#pragma unroll
    for (int r = 0; r < NW; ++r) acc[r] = 0.0f;
    auto step = [&](int i, const uint4* wv) {
      const int k = lane * 8 + 256 * i;
      const float4 a = *reinterpret_cast<const float4*>(xs + k);
      const float4 b = *reinterpret_cast<const float4*>(xs + k + 4);
      const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int r = 0; r < NW; ++r) {
        float wf[8];
        dev::unpack8(wv[r], wf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(wf[j], xv[j], acc[r]);
      }
    };
    const int t0 = fi * C;
#pragma unroll
    for (int t = 0; t < P; ++t) {
      const int i = t - t0;
      if (i >= 0 && i < C) step(i, &pre[t * NW]);
    }
#pragma unroll 4
    for (int i = max(0, min(C, P - t0)); i < C; ++i) {
      uint4 wv[NW];
#pragma unroll
      for (int r = 0; r < NW; ++r) wv[r] = dev::load_weights(w[r] + lane * 8 + 256 * i);
      step(i, wv);
    }
#pragma unroll
    for (int r = 0; r < NW; ++r) acc[r] = dev::warp_sum(acc[r]);
    if (lane != 0) continue;
    if constexpr (EPI == 2) {
      // + 0.0f as linear.cu's absent bias does (it turns −0 into +0).
      const float g = acc[0] + 0.0f, u = acc[1] + 0.0f;
      y[f] = BF16 ? dev::swiglu_bf16(g, u) : __fmul_rn(__fmul_rn(g, dev::sigmoid_f32(g)), u);
    } else if constexpr (EPI == 1) {
      const float old = __ldcg(y + f);
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

// All blocks of the grid meet here; writes before it are visible to every block after it.
// barrier[0] counts arrivals over the whole launch (barrier k of the launch waits for k·blocks), so
// an arrival is one release-add and the wait one acquire poll, with no reset between barriers;
// barrier[1] counts the blocks that finished, and the last one zeroes both for the next launch.
__device__ __forceinline__ void grid_sync(unsigned* barrier, unsigned& target) {
  target += gridDim.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(barrier) : "memory");
    while (load_acquire(barrier) < target) {
    }
  }
  __syncthreads();
}

__device__ void grid_exit(unsigned* barrier) {
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(barrier + 1, 1u) == gridDim.x - 1) {
    barrier[0] = 0;
    barrier[1] = 0;
  }
}

// Query head h of the row against keys 0..pos (attention.cu's fused decode kernel with as many
// warps as it would use; the other warps only meet the block barriers).
template <bool BF16>
__device__ void attend_head(const DecodeStackArgs& a, int layer, int h, int seq, int pos, float* sm) {
  const int Hq = a.q_heads, Hkv = a.kv_heads, D = a.head_dim;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = a.kv_capacity > kSmallContext ? kWarps : 4;
  const bool active = warp < warps;
  const int n = min(pos + 1, static_cast<int>(a.kv_capacity));
  float* o = a.attn + static_cast<int64_t>(h) * D;
  if (n <= 0) {
    for (int d = threadIdx.x; d < D; d += kThreads) o[d] = 0.0f;
    return;
  }
  float* qs = sm;
  float* knew = qs + D;
  float* vnew = knew + D;
  float* sc = vnew + D;
  float* part = sc + n;
  const int group = Hq / Hkv, g = h / group;
  const int64_t kstride = static_cast<int64_t>(Hkv) * D;
  float* kcache = a.kv_base + 2 * static_cast<int64_t>(layer) * a.kv_layer_floats;
  float* vcache = kcache + a.kv_layer_floats;
  const float* kb = kcache + seq * a.kv_seq_stride + static_cast<int64_t>(g) * D;
  const float* vb = vcache + seq * a.kv_seq_stride + static_cast<int64_t>(g) * D;
  const StackLayerWeights& L = a.layers[layer];
  const float* row = a.qkv;
  const bool store = h % group == 0 && pos < a.kv_capacity;
  const int64_t off = seq * a.kv_seq_stride + static_cast<int64_t>(pos) * kstride + static_cast<int64_t>(g) * D;
  if (warp == 0) {
    for (int d = lane; d < D; d += 32) qs[d] = __ldcg(row + static_cast<int64_t>(h) * D + d);
    __syncwarp();
    dev::norm_rope_head(qs, D, L.q_norm, a.eps, a.inv_freq, pos, qs, BF16);
  } else if (warp == 1) {
    for (int d = lane; d < D; d += 32) knew[d] = __ldcg(row + static_cast<int64_t>(Hq + g) * D + d);
    __syncwarp();
    dev::norm_rope_head(knew, D, L.k_norm, a.eps, a.inv_freq, pos, knew, BF16);
    __syncwarp();
    if (store)
      for (int d = lane; d < D; d += 32) kcache[off + d] = knew[d];
  } else if (warp == 2) {
    for (int d = lane; d < D; d += 32) {
      const float v = __ldcg(row + static_cast<int64_t>(Hq + Hkv + g) * D + d);
      vnew[d] = v;
      if (store) vcache[off + d] = v;
    }
  }
  __syncthreads();
  if (active)
    for (int j0 = warp * kKeysPerWarp; j0 < n; j0 += warps * kKeysPerWarp) {
      const float* kr[kKeysPerWarp];
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) kr[u] = j0 + u == pos ? knew : kb + (j0 + u) * kstride;
      float acc[kKeysPerWarp];
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) acc[u] = 0.0f;
      for (int d = lane; d < D; d += 32) {
        const float qd = qs[d];
#pragma unroll
        for (int u = 0; u < kKeysPerWarp; ++u)
          if (j0 + u < n) acc[u] = fmaf(qd, kr[u][d], acc[u]);
      }
#pragma unroll
      for (int u = 0; u < kKeysPerWarp; ++u) {
        const float v = dev::warp_sum(acc[u]);
        if (lane == 0 && j0 + u < n)
          sc[j0 + u] = BF16 ? dev::round_bf16(__fmul_rn(dev::round_bf16(v), a.scale)) : v * a.scale;
      }
    }
  __syncthreads();
  if (active) {
    float mx = -__int_as_float(0x7f800000);
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sc[j]);
    mx = dev::warp_max(mx);
    double sum = 0.0;
    for (int j = lane; j < n; j += 32) sum += expf(sc[j] - mx);
    sum = dev::warp_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    const float sum_f = static_cast<float>(sum);
    float acc[kMaxDimChunks];
#pragma unroll
    for (int i = 0; i < kMaxDimChunks; ++i) acc[i] = 0.0f;
#pragma unroll 4
    for (int j = warp; j < n; j += warps) {
      const float pj = BF16 ? dev::round_bf16(__fdiv_rn(expf(sc[j] - mx), sum_f)) : expf(sc[j] - mx) * inv;
      const float* vr = j == pos ? vnew : vb + j * kstride;
#pragma unroll
      for (int i = 0; i < kMaxDimChunks; ++i) {
        const int d = lane + 32 * i;
        if (d < D) acc[i] = fmaf(pj, vr[d], acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxDimChunks; ++i) {
      const int d = lane + 32 * i;
      if (d < D) part[warp * D + d] = acc[i];
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += part[w * D + d];
    o[d] = BF16 ? dev::round_bf16(total) : total;
  }
  __syncthreads();  // the shared scratch is reused by the next head or phase
}

template <bool BF16>
__global__ void __launch_bounds__(kThreads, 1) decode_stack_kernel(DecodeStackArgs a) {
  extern __shared__ __align__(16) float sm[];
  __shared__ float inv_s;
  const int gw = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int W = gridDim.x * kWarps;
  const int64_t H = a.hidden, D = a.head_dim, qw = a.q_heads * D, kvw = a.kv_heads * D, I = a.intermediate;
  const int seq = a.seq[0], pos = a.pos[0];
  auto qkv_mat = [&](const StackLayerWeights& L) { return Mat{{L.q, L.k, L.v}, qw, kvw, qw + 2 * kvw, H}; };
  auto o_mat = [&](const StackLayerWeights& L) { return Mat{{L.o, nullptr, nullptr}, H, 0, H, qw}; };
  auto gu_mat = [&](const StackLayerWeights& L) { return Mat{{L.gate, L.up, nullptr}, I, 0, I, H}; };
  auto down_mat = [&](const StackLayerWeights& L) { return Mat{{L.down, nullptr, nullptr}, H, 0, H, I}; };

  unsigned target = 0;
  uint4 pre[kPre];
  prefetch<1>(qkv_mat(a.layers[0]), gw, W, pre);
  for (int l = 0; l < a.n_layers; ++l) {
    const StackLayerWeights L = a.layers[l];
    stage<BF16>(a.h, H, L.in_norm, a.eps, sm, &inv_s);
    gemv_phase<1, 0, BF16>(qkv_mat(L), sm, pre, gw, W, a.qkv);
    prefetch<1>(o_mat(L), gw, W, pre);
    grid_sync(a.barrier, target);

    for (int h = blockIdx.x; h < a.q_heads; h += gridDim.x) attend_head<BF16>(a, l, h, seq, pos, sm);
    grid_sync(a.barrier, target);

    stage<BF16>(a.attn, qw, nullptr, a.eps, sm, &inv_s);
    gemv_phase<1, 1, BF16>(o_mat(L), sm, pre, gw, W, a.h);
    prefetch<2>(gu_mat(L), gw, W, pre);
    grid_sync(a.barrier, target);

    stage<BF16>(a.h, H, L.post_norm, a.eps, sm, &inv_s);
    gemv_phase<2, 2, BF16>(gu_mat(L), sm, pre, gw, W, a.mlp);
    prefetch<1>(down_mat(L), gw, W, pre);
    grid_sync(a.barrier, target);

    stage<BF16>(a.mlp, I, nullptr, a.eps, sm, &inv_s);
    gemv_phase<1, 1, BF16>(down_mat(L), sm, pre, gw, W, a.h);
    if (l + 1 < a.n_layers) {
      prefetch<1>(qkv_mat(a.layers[l + 1]), gw, W, pre);
      grid_sync(a.barrier, target);
    }
  }
  grid_exit(a.barrier);
}

struct Launch {
  bool ok = false;
  int blocks = 0;
  int max_smem = 0;
};
Launch g_launch;
std::once_flag g_once;

int64_t smem_floats(const DecodeStackArgs& a) {
  const int64_t D = a.head_dim;
  const int64_t stage_in = std::max<int64_t>({a.hidden, a.q_heads * D, a.intermediate});
  const int64_t attn = 3 * D + a.kv_capacity + kWarps * D;
  return std::max(stage_in, attn);
}

// Opt-in until it has been measured and checked on the GPU machine: CHORUS_PERSISTENT=1.
bool persistent_disabled() {
  static const bool off = [] {
    const char* e = std::getenv("CHORUS_PERSISTENT");
    return !(e && std::strcmp(e, "1") == 0);
  }();
  return off;
}

}  // namespace

bool decode_stack_reserve() {
  std::call_once(g_once, [] {
    int dev = 0, sms = 0, optin = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess || !coop)
      return;
    const int max_smem = optin - 1024;  // the kernel's static shared memory comes on top
    for (auto* k : {decode_stack_kernel<false>, decode_stack_kernel<true>}) {
      if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem) != cudaSuccess) {
        cudaGetLastError();
        return;
      }
      int per_sm = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, static_cast<size_t>(max_smem)) !=
              cudaSuccess ||
          per_sm < 1) {
        cudaGetLastError();
        return;
      }
    }
    g_launch.blocks = sms;
    g_launch.max_smem = max_smem;
    g_launch.ok = true;
  });
  return g_launch.ok;
}

bool decode_stack_applies(const DecodeStackArgs& a) {
  if (persistent_disabled() || !g_launch.ok) return false;
  const int64_t D = a.head_dim;
  if (a.n_layers <= 0 || a.hidden <= 0 || a.q_heads <= 0 || a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0 ||
      D <= 0 || D % 2 != 0 || D > 32 * kMaxDimChunks)
    return false;
  if (a.hidden % 256 != 0 || (a.q_heads * D) % 256 != 0 || a.intermediate <= 0 || a.intermediate % 256 != 0)
    return false;
  // Staged inputs are read as float4.
  for (const void* p : {static_cast<const void*>(a.h), static_cast<const void*>(a.attn), static_cast<const void*>(a.mlp)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return smem_floats(a) * static_cast<int64_t>(sizeof(float)) <= g_launch.max_smem;
}

Status decode_stack(const DecodeStackArgs& a, cudaStream_t s) {
  if (!decode_stack_applies(a)) return make_error(ErrorCode::kUnsupported, "decode_stack: shape not supported");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(g_launch.blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_floats(a)) * sizeof(float);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CHORUS_CUDA_TRY(cudaLaunchKernelEx(&cfg, a.bf16 ? decode_stack_kernel<true> : decode_stack_kernel<false>, a));
  return ok_status();
}

}  // namespace chorus::cuda
