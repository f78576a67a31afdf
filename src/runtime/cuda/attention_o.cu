// Decode attention fused with the o projection, for one new row over a small cache (Breeze's depth
// decoder: 16 positions). Why: in the per-kernel layer (q/k/v, attention, o, gate/up, down) each
// launch boundary costs a grid completion and a wait; the attention and o move almost no bytes, so
// one launch less per layer is time saved outright.
//
// Every block computes all query heads itself (4 warps per head, the attention kernel's split, so
// the head outputs are bit-identical to attention_decode's), keeps them in shared memory, and then
// each of its 32 warps forms one o feature in the single-row matrix-vector kernel's order (lane l
// sums k = 8l + 256i + j in order, then a butterfly) and adds it to the residual stream. So the
// result equals attention_decode followed by cuda::linear bit for bit. The heads are computed once
// per block (32 blocks for 1024 features): a few µs of on-chip work, against a launch boundary.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "runtime/cuda/attend_head.cuh"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kMaxWarps = 32;            // warps per block = o features per block; heads at once = warps / kHeadWarps
constexpr int kHeadWarps = 4;            // = dev::attention_warps(capacity) for the caches taken here
constexpr int kMaxCapacity = 32;         // the attention kernel's preload limit (kPreloadKeys)
constexpr int kPreChunks = 4;            // 16-byte weight chunks per lane loaded before the wait
static_assert(dev::kSmallContext >= kMaxCapacity, "4 warps per head, as attention_decode");

struct Params {
  const float* qkv;  // the row: [q heads | k heads | v heads] × D
  const float *qn, *kn;
  float eps;
  const float* inv_freq;
  int Hq, Hkv, D;
  float scale;
  const int32_t* seq;
  const int32_t* pos;
  KvLayer kv;
  const uint16_t* wo;  // [n_out, Hq·D] bf16
  int64_t n_out;
  float* h;  // [n_out], += o
  bool bf16;
};

// Shared memory (floats): earlier keys, then values [Hkv][capacity][D]; the attention row [Hq·D];
// one head scratch per concurrent head.
struct Layout {
  int64_t keys, values, row, scratch, per_head, total;
};
__host__ __device__ inline Layout layout(int Hq, int Hkv, int D, int64_t capacity) {
  Layout l{};
  const int64_t cache = static_cast<int64_t>(Hkv) * capacity * D;
  l.keys = 0;
  l.values = cache;
  l.row = 2 * cache;
  l.scratch = l.row + static_cast<int64_t>(Hq) * D;
  l.per_head = (dev::head_scratch_floats(D, capacity, kHeadWarps) + 3) & ~int64_t{3};
  l.total = l.scratch + (kMaxWarps / kHeadWarps) * l.per_head;
  return l;
}

// Keys and values of positions 0..earlier−1 of every kv head → shared [Hkv][capacity][D], through
// L2 (earlier kernels wrote them). All threads.
__device__ inline void load_cache(const Params& a, int64_t seq, int earlier, float* keys, float* values) {
  const int per_row = a.D / 4;
  const int64_t kstride = static_cast<int64_t>(a.Hkv) * a.D;
  const float* kb = a.kv.k + seq * a.kv.seq_stride;
  const float* vb = a.kv.v + seq * a.kv.seq_stride;
  const int total = a.Hkv * earlier * per_row;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int g = i / (earlier * per_row), rest = i % (earlier * per_row);
    const int j = rest / per_row, d = 4 * (rest % per_row);
    const int64_t src = j * kstride + static_cast<int64_t>(g) * a.D + d;
    const int64_t dst = (static_cast<int64_t>(g) * a.kv.capacity + j) * a.D + d;
    *reinterpret_cast<float4*>(keys + dst) = __ldcg(reinterpret_cast<const float4*>(kb + src));
    *reinterpret_cast<float4*>(values + dst) = __ldcg(reinterpret_cast<const float4*>(vb + src));
  }
}

template <int kWarps, bool BF16>
__global__ void __launch_bounds__(kWarps * 32) attention_o_kernel(Params a) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int K = a.Hq * a.D;
  const Layout L = layout(a.Hq, a.Hkv, a.D, a.kv.capacity);
  float* keys = smem + L.keys;
  float* values = smem + L.values;
  float* row = smem + L.row;

  // Before the wait: this warp's o weight chunks and the earlier positions' keys and values. The
  // position read now decides what is loaded; after the wait it must still be the same.
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool valid = f < a.n_out;
  const uint16_t* w = a.wo + (valid ? f : 0) * K;
  const uint64_t pol = dev::weight_l2_policy();
  uint4 pre[kPreChunks];
#pragma unroll
  for (int i = 0; i < kPreChunks; ++i) {
    const int k = lane * 8 + 256 * i;
    pre[i] = valid && k < K ? dev::load_weights(w + k, pol) : make_uint4(0, 0, 0, 0);
  }
  const int64_t seq0 = a.seq[0];
  const int pos0 = a.pos[0];
  if (seq0 >= 0 && pos0 >= 0) load_cache(a, seq0, min(pos0, static_cast<int>(a.kv.capacity)), keys, values);
  dev::pdl_wait();

  const int64_t seq = a.seq[0];
  const int pos = a.pos[0];
  const int n = min(pos + 1, static_cast<int>(a.kv.capacity));
  if (seq < 0 || n <= 0) {
    for (int i = threadIdx.x; i < K; i += blockDim.x) row[i] = 0.0f;
  } else {
    if (seq != seq0 || pos != pos0) {  // a kernel just before moved the position: load again
      __syncthreads();
      load_cache(a, seq, min(pos, static_cast<int>(a.kv.capacity)), keys, values);
    }
    __syncthreads();
    const int group = a.Hq / a.Hkv;
    const int64_t kstride = static_cast<int64_t>(a.Hkv) * a.D;
    const int slot = warp / kHeadWarps, first_warp = slot * kHeadWarps;
    const dev::HeadScratch s = dev::head_scratch(smem + L.scratch + slot * L.per_head, a.D, n);
    for (int h0 = 0; h0 < a.Hq; h0 += kWarps / kHeadWarps) {
      const int h = h0 + slot, g = h / group;
      const bool active = h < a.Hq;
      const float* kg = keys + static_cast<int64_t>(g) * a.kv.capacity * a.D;
      const float* vg = values + static_cast<int64_t>(g) * a.kv.capacity * a.D;
      if (active) {
        // Block 0 stores the new key and value for later steps; the others only use them.
        const int64_t off = seq * a.kv.seq_stride + static_cast<int64_t>(pos) * kstride + static_cast<int64_t>(g) * a.D;
        const bool store = blockIdx.x == 0 && h % group == 0 && pos < a.kv.capacity;
        dev::head_new_row(a.qkv, h, g, a.Hq, a.Hkv, a.D, a.qn, a.kn, a.eps, a.inv_freq, pos, BF16, s.q, s.knew,
                          s.vnew, store, a.kv.k + off, a.kv.v + off, first_warp);
      }
      __syncthreads();
      if (active) dev::head_scores<false>(s.q, kg, a.D, s.knew, pos, n, kHeadWarps, a.D, a.scale, BF16, s.scores, first_warp);
      __syncthreads();
      if (active) dev::head_values<8>(s.scores, n, vg, a.D, s.vnew, pos, kHeadWarps, a.D, BF16, s.part, first_warp);
      __syncthreads();
      if (active) dev::head_output(s.part, kHeadWarps, a.D, 32 * kHeadWarps, BF16, row + static_cast<int64_t>(h) * a.D, first_warp);
      __syncthreads();
    }
  }
  if (!valid) return;

  float acc = 0.0f;
  auto step = [&](int k, const uint4& wv) {
    float wf[8];
    dev::unpack8(wv, wf);
    const float4 x0 = *reinterpret_cast<const float4*>(row + k);
    const float4 x1 = *reinterpret_cast<const float4*>(row + k + 4);
    const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = fmaf(wf[j], xv[j], acc);
  };
#pragma unroll
  for (int i = 0; i < kPreChunks; ++i) {
    const int k = lane * 8 + 256 * i;
    if (k < K) step(k, pre[i]);
  }
  for (int k = lane * 8 + 256 * kPreChunks; k < K; k += 256) step(k, dev::load_weights(w + k, pol));
  acc = dev::warp_sum(acc);
  if (lane == 0) dev::store_out(a.h + f, acc, 1, BF16);
}

std::atomic<int64_t> g_reserved{0};  // dynamic shared memory the kernels may use (bytes)
std::atomic<uint64_t> g_launches{0};
// -1: as CHORUS_ATTENTION_O says (on unless it is "0"); 0 / 1: set by attention_o_set_enabled.
std::atomic<int> g_enabled{-1};

bool enabled() {
  const int e = g_enabled.load(std::memory_order_relaxed);
  if (e >= 0) return e == 1;
  static const bool env_on = [] {
    const char* v = std::getenv("CHORUS_ATTENTION_O");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return env_on;
}

size_t smem_bytes(const HeadShape& h, int64_t capacity) {
  return static_cast<size_t>(layout(static_cast<int>(h.q_heads), static_cast<int>(h.kv_heads),
                                    static_cast<int>(h.head_dim), capacity)
                                 .total) *
         sizeof(float);
}

bool shape_fits(const HeadShape& h, int64_t capacity, int64_t o_cols) {
  return h.q_heads > 0 && h.kv_heads > 0 && h.q_heads % h.kv_heads == 0 && h.head_dim > 0 && h.head_dim % 8 == 0 &&
         h.head_dim <= 32 * dev::kMaxDimChunks && capacity > 0 && capacity <= kMaxCapacity &&
         o_cols == h.q_heads * h.head_dim;
}

}  // namespace

Status attention_o_reserve(HeadShape h, int64_t capacity) {
  if (!shape_fits(h, capacity, h.q_heads * h.head_dim)) return ok_status();  // never taken: nothing to reserve
  const size_t need = smem_bytes(h, capacity);
  if (need <= static_cast<size_t>(g_reserved.load())) return ok_status();
  int dev = 0, max_optin = 0;
  CHORUS_CUDA_TRY(cudaGetDevice(&dev));
  CHORUS_CUDA_TRY(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (need > static_cast<size_t>(max_optin)) return ok_status();  // stays on the two-launch path
  for (auto* k : {attention_o_kernel<16, false>, attention_o_kernel<16, true>, attention_o_kernel<32, false>,
                  attention_o_kernel<32, true>})
    CHORUS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(need)));
  g_reserved.store(static_cast<int64_t>(need));
  return ok_status();
}

bool attention_o_applies(HeadShape h, const RowMap& rows, const KvLayer& kv, const DeviceMatrix& o) {
  return enabled() && rows.decode && rows.rows == 1 && shape_fits(h, kv.capacity, o.cols) &&
         smem_bytes(h, kv.capacity) <= static_cast<size_t>(g_reserved.load());
}

Status attention_o_decode(const float* qkv, HeadShape h, const float* q_norm, const float* k_norm, float eps,
                          const float* inv_freq, float scale, RowMap rows, KvLayer kv, DeviceMatrix o, float* residual,
                          cudaStream_t s, bool bf16) {
  if (!attention_o_applies(h, rows, kv, o))
    return make_error(ErrorCode::kInternal, "cuda attention_o: shape or rows not taken (check attention_o_applies)");
  Params p{};
  p.qkv = qkv;
  p.qn = q_norm;
  p.kn = k_norm;
  p.eps = eps;
  p.inv_freq = inv_freq;
  p.Hq = static_cast<int>(h.q_heads);
  p.Hkv = static_cast<int>(h.kv_heads);
  p.D = static_cast<int>(h.head_dim);
  p.scale = scale;
  p.seq = rows.seq;
  p.pos = rows.pos;
  p.kv = kv;
  p.wo = o.data;
  p.n_out = o.rows;
  p.h = residual;
  p.bf16 = bf16;
  const size_t smem = smem_bytes(h, kv.capacity);
  static const int warps = [] {
    const char* v = std::getenv("CHORUS_ATTENTION_O_WARPS");
    return v && std::strcmp(v, "32") == 0 ? 32 : 16;
  }();
  const unsigned blocks = static_cast<unsigned>((o.rows + warps - 1) / warps);
  const dim3 block(static_cast<unsigned>(warps * 32));
  if (warps == 32) {
    if (bf16) CHORUS_CUDA_TRY(launch(attention_o_kernel<32, true>, dim3(blocks), block, smem, s, p));
    else CHORUS_CUDA_TRY(launch(attention_o_kernel<32, false>, dim3(blocks), block, smem, s, p));
  } else {
    if (bf16) CHORUS_CUDA_TRY(launch(attention_o_kernel<16, true>, dim3(blocks), block, smem, s, p));
    else CHORUS_CUDA_TRY(launch(attention_o_kernel<16, false>, dim3(blocks), block, smem, s, p));
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return ok_status();
}

void attention_o_set_enabled(bool on) { g_enabled.store(on ? 1 : 0, std::memory_order_relaxed); }
uint64_t attention_o_launches() { return g_launches.load(std::memory_order_relaxed); }

}  // namespace chorus::cuda
