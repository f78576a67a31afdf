// fused_mlp: the MLP of one decode row, or of two (RMS-norm, gate and up, SwiGLU, down, residual
// add), as one streaming launch plus a small reduction launch.
//
// Why: as two matrix-vector launches (gate/up, then down) each launch ramps up and drains on its
// own, and the second cannot start loading before the first is done. Measured on the H200 at
// Breeze's depth-decoder shape (1024 → 2 × 8192 → 1024, 50 MB): the pair takes 22.0 µs back to back,
// one launch over the three matrices 17.8 µs (+1.4 µs to add the partial sums).
//
// Layout: warp w of W takes intermediate features f = w, w + W, ...: it loads gate row f, up row f
// and row f of down transposed (down's column f, contiguous there), AHEAD features ahead of the one
// it sums (2 at hidden 1024; 1 at 2048, where the normed input moves to shared memory to fit).
// Lane l owns inputs k = 8l + 256i + j (i < H/256, j < 8), summed in that order and reduced over
// the lanes by the same butterfly as linear's single-row kernel, so gate·n and up·n (and the
// activation) are bit-identical to linear. The activation times down's column accumulates into the
// lane's outputs (the same k positions); a block adds its warps in order into one partial row, and
// the reduction launch adds the partial rows in block order: deterministic, independent of timing.
// Two rows (R = 2, hidden 1024: guidance's branches): each loaded feature serves both rows (one
// feature ahead, the normed inputs in shared memory: two ahead spill), with each row's
// arithmetic unchanged, so a row is bit-identical to its own one-row launch (Breeze with CFG: 10.34
// ms per frame against 14.06 ms with the two rows through the two-launch path).
// One row at hidden 1024 (the depth decoder's single stream) takes the bulk-copy kernel further
// down instead: the weights stream through shared memory, one block per SM.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "runtime/cuda/bulk_copy.cuh"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"

namespace chorus::cuda {

namespace {

constexpr int kMlpWarps = 4;
constexpr int kBlocksPerSm = 2;            // measured: 8 warps per SM beat 12 and 16
constexpr int kMaxBlocks = 512;
constexpr int kReduceWarps = 16;

struct MlpParams {
  int64_t hidden;
  float* h;
  const float* norm_w;
  float eps;
  const uint16_t* gate;
  const uint16_t* up;
  const uint16_t* down_t;
  int64_t inter;
  float* partial;
  L2Prefetch prefetch[4];
};

// CH: 16-byte chunks per lane and row (hidden = 256·CH). XS: the normed input sits in shared memory
// instead of registers (so wider rows or more features in flight fit the register file). R: input
// rows (1, or 2 for the two branches of guidance), each feature's weights read once for all of them.
template <int CH, bool BF16, int AHEAD, bool XS, int R>
__global__ void __launch_bounds__(kMlpWarps * 32, kBlocksPerSm) fused_mlp_kernel(MlpParams p) {
  constexpr int H = 256 * CH;
  __shared__ float sums[kMlpWarps][H];
  __shared__ float xs[XS ? R : 1][XS ? H : 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t W = static_cast<int64_t>(gridDim.x) * kMlpWarps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kMlpWarps + warp;
  const uint64_t pol = dev::weight_l2_policy();
  // wb[a]: gate, up and down-column chunks of the a-th feature in flight.
  uint4 wb[AHEAD][3][CH];
  auto load = [&](int64_t f, uint4 (&w)[3][CH]) {
#pragma unroll
    for (int i = 0; i < CH; ++i) {
      const int64_t off = f * H + lane * 8 + 256 * i;
      w[0][i] = dev::load_weights(p.gate + off, pol);
      w[1][i] = dev::load_weights(p.up + off, pol);
      w[2][i] = dev::load_weights(p.down_t + off, pol);
    }
  };
#pragma unroll
  for (int a = 0; a < AHEAD; ++a)
    if (first + a * W < p.inter) load(first + a * W, wb[a]);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dev::prefetch_l2_share(p.prefetch[i].ptr, p.prefetch[i].bytes, blockIdx.x, gridDim.x);
  }
  dev::pdl_wait();

  float xn[XS ? 1 : R][XS ? 1 : CH][8];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float* hr = p.h + r * H;
    // 1 / RMS of the row exactly as linear's single-row kernel derives it.
    double ss;
    if constexpr (H == 1024) ss = dev::warp_sum_squares_1024(hr);
    else ss = dev::warp_sum_squares(hr, H);
    const float inv = dev::inv_rms(ss, H, p.eps, BF16);
    if constexpr (XS) {
      for (int k = threadIdx.x * 8; k < H; k += kMlpWarps * 32 * 8) {
        float v[8];
        dev::load_x8(hr, k, p.norm_w, inv, BF16, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) xs[r][k + j] = v[j];
      }
    } else {
#pragma unroll
      for (int i = 0; i < CH; ++i) dev::load_x8(hr, lane * 8 + 256 * i, p.norm_w, inv, BF16, xn[r][i]);
    }
  }
  if constexpr (XS) __syncthreads();

  float acc[R][CH][8];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < CH; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r][i][j] = 0.0f;
  for (int64_t base = first; base < p.inter; base += AHEAD * W) {
#pragma unroll
    for (int a = 0; a < AHEAD; ++a) {
      const int64_t f = base + a * W;
      if (f >= p.inter) break;
      float g[R], u[R];
#pragma unroll
      for (int r = 0; r < R; ++r) g[r] = u[r] = 0.0f;
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        float gf[8], uf[8];
        dev::unpack8(wb[a][0][i], gf);
        dev::unpack8(wb[a][1][i], uf);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float x[8];
          if constexpr (XS) {
            dev::load_x8(xs[r], lane * 8 + 256 * i, nullptr, 1.0f, BF16, x);  // already normed
          } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) x[j] = xn[r][i][j];
          }
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            g[r] = fmaf(gf[j], x[j], g[r]);
            u[r] = fmaf(uf[j], x[j], u[r]);
          }
        }
      }
      uint4 col[CH];
#pragma unroll
      for (int i = 0; i < CH; ++i) col[i] = wb[a][2][i];
      if (f + AHEAD * W < p.inter) load(f + AHEAD * W, wb[a]);
      float act[R];
#pragma unroll
      for (int r = 0; r < R; ++r) act[r] = dev::swiglu_out(dev::warp_sum(g[r]), dev::warp_sum(u[r]), BF16);
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        float df[8];
        dev::unpack8(col[i], df);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r][i][j] = fmaf(act[r], df[j], acc[r][i][j]);
      }
    }
  }
  // Partial rows: partial[(r · blocks + block) · H + k].
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r > 0) __syncthreads();  // the previous row's sums are read
#pragma unroll
    for (int i = 0; i < CH; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) sums[warp][lane * 8 + 256 * i + j] = acc[r][i][j];
    __syncthreads();
    float* out = p.partial + (static_cast<int64_t>(r) * gridDim.x + blockIdx.x) * H;
    for (int k = threadIdx.x; k < H; k += kMlpWarps * 32) {
      float t = sums[0][k];
#pragma unroll
      for (int w = 1; w < kMlpWarps; ++w) t += sums[w][k];
      out[k] = t;
    }
  }
}

// ---- one row through bulk copies (hidden 1024) -------------------------------------------------
// One block per SM: a producer warp streams the block's contiguous share of the features (gate rows,
// up rows and down's columns: three contiguous ranges) through a ring of shared-memory stages with
// bulk copies (cp.async.bulk, completion counted on an mbarrier per stage), and eight consumer warps
// take one feature of each stage each. A plain 50 MB read runs at 4.06 TB/s this way on the H200,
// against 3.03 TB/s for 128-thread blocks of 16-byte register loads; in the engine the depth
// decoder's MLP gains 0.7 µs per layer over the register kernel. Two rows and hidden 2048 measured
// slower this way (more arithmetic per copied byte; two stages at 2048) and stay on the kernel above.
// Each feature's sums are the register kernel's (lane l owns k = 8l + 256i + j), so gate·n and up·n
// are bit-identical to linear; the down sums run in this kernel's own fixed order (features by
// stage, warps in order), so the result is deterministic but not bit-identical to the register kernel.
constexpr int kBulkConsumers = 8;
constexpr int kBulkThreads = (kBulkConsumers + 1) * 32;
constexpr int kBulkRingBytes = 192 * 1024;

template <int CH, bool BF16>
__global__ void __launch_bounds__(kBulkThreads, 1) fused_mlp_bulk_kernel(MlpParams p) {
  constexpr int H = 256 * CH;
  constexpr int kRowBytes = H * 2;
  constexpr int kStageBytes = 3 * kBulkConsumers * kRowBytes;  // gate rows, up rows, down columns
  constexpr int S = kBulkRingBytes / kStageBytes;
  static_assert(S >= 2, "ring stages");
  static_assert(kBulkConsumers * H * 4 <= kBulkRingBytes, "the warps' sums reuse the ring");
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t f0 = blockIdx.x * p.inter / gridDim.x, f1 = (blockIdx.x + 1) * p.inter / gridDim.x;
  const int stages = static_cast<int>((f1 - f0 + kBulkConsumers - 1) / kBulkConsumers);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      dev::mbar_init(&full[s], 1);
      dev::mbar_init(&empty[s], kBulkConsumers);
    }
    dev::mbar_init_fence();
  }
  __syncthreads();

  if (warp == kBulkConsumers) {  // the producer reads weights only, so it starts before the wait
    if (lane != 0) return;
    const uint16_t* src[3] = {p.gate, p.up, p.down_t};
    for (int k = 0; k < stages; ++k) {
      const int s = k % S;
      if (k >= S) dev::mbar_wait(&empty[s], ((k / S) - 1) & 1);  // its previous use was consumed
      const int64_t f = f0 + static_cast<int64_t>(k) * kBulkConsumers;
      const int64_t bytes = (f1 - f < kBulkConsumers ? f1 - f : kBulkConsumers) * kRowBytes;
      dev::mbar_expect_bytes(&full[s], 3 * bytes);
      for (int m = 0; m < 3; ++m)
        dev::bulk_copy_weights(ring + s * kStageBytes + m * kBulkConsumers * kRowBytes, src[m] + f * H, bytes, &full[s]);
      if (k == min(S, stages) - 1)  // after the first stages: the next layer's attention weights
        for (int i = 0; i < 4; ++i) dev::prefetch_l2_share(p.prefetch[i].ptr, p.prefetch[i].bytes, blockIdx.x, gridDim.x);
    }
    return;
  }

  float gw[CH][8];  // the norm weights (constant) before the wait, as gemv1's NPRE
#pragma unroll
  for (int i = 0; i < CH; ++i) dev::load_w8(p.norm_w, lane * 8 + 256 * i, gw[i]);
  dev::pdl_wait();
  float xn[CH][8];
  {
    static_assert(H == 1024, "the bulk kernel's rows");
    const float inv = dev::inv_rms(dev::warp_sum_squares_1024(p.h), H, p.eps, BF16);
#pragma unroll
    for (int i = 0; i < CH; ++i) dev::load_x8_normed(p.h, lane * 8 + 256 * i, gw[i], inv, BF16, xn[i]);
  }
  float acc[CH][8];
#pragma unroll
  for (int i = 0; i < CH; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  for (int k = 0; k < stages; ++k) {
    const int s = k % S;
    dev::mbar_wait(&full[s], (k / S) & 1);
    if (f0 + static_cast<int64_t>(k) * kBulkConsumers + warp < f1) {
      const uint4* row[3];
#pragma unroll
      for (int m = 0; m < 3; ++m)
        row[m] = reinterpret_cast<const uint4*>(ring + s * kStageBytes + (m * kBulkConsumers + warp) * kRowBytes);
      float g = 0.0f, u = 0.0f;
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        float gf[8], uf[8];
        dev::unpack8(row[0][lane + 32 * i], gf);
        dev::unpack8(row[1][lane + 32 * i], uf);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          g = fmaf(gf[j], xn[i][j], g);
          u = fmaf(uf[j], xn[i][j], u);
        }
      }
      const float act = dev::swiglu_out(dev::warp_sum(g), dev::warp_sum(u), BF16);
#pragma unroll
      for (int i = 0; i < CH; ++i) {
        float df[8];
        dev::unpack8(row[2][lane + 32 * i], df);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(act, df[j], acc[i][j]);
      }
    }
    __syncwarp();  // the warp is done reading the stage: once all are, it may be refilled
    if (lane == 0) dev::mbar_arrive(&empty[s]);
  }
  // Every stage was consumed, so every copy has landed: the ring now holds the warps' sums
  // (named barrier 1: the consumer warps only; the producer has returned).
  asm volatile("bar.sync 1, %0;" ::"n"(kBulkConsumers * 32) : "memory");
  float* sums = reinterpret_cast<float*>(ring);
#pragma unroll
  for (int i = 0; i < CH; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) sums[warp * H + lane * 8 + 256 * i + j] = acc[i][j];
  asm volatile("bar.sync 1, %0;" ::"n"(kBulkConsumers * 32) : "memory");
  float* out = p.partial + static_cast<int64_t>(blockIdx.x) * H;
  for (int k = threadIdx.x; k < H; k += kBulkConsumers * 32) {
    float t = sums[k];
#pragma unroll
    for (int w = 1; w < kBulkConsumers; ++w) t += sums[w * H + k];
    out[k] = t;
  }
}

// h[r][f] += Σ_b partial[r][b][f] (b in order within each warp's share, then the warps' sums in
// order), rounded as linear's residual epilogue rounds it. Block (x, r) takes row r's outputs
// [32x, 32x + 32).
// EARLY: the next launch (the next layer's q/k/v) may start before this one waits. A kernel lets
// its successor launch only after its own wait, and this one waits through the whole MLP, so
// without EARLY the q/k/v launch becomes resident only when the MLP ends; with it, it loads its
// weights during the MLP's stream (its own wait still ends after this kernel, so after the MLP).
template <bool BF16, bool EARLY>
__global__ void __launch_bounds__(kReduceWarps * 32) mlp_reduce_kernel(const float* partial, int parts, int64_t hidden,
                                                                      float* h) {
  __shared__ float red[kReduceWarps][32];
  if constexpr (EARLY) {
    dev::pdl_launch_dependents();
    dev::pdl_wait_only();
  } else {
    dev::pdl_wait();
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t f = static_cast<int64_t>(blockIdx.x) * 32 + lane, r = blockIdx.y;
  const float* rows = partial + r * parts * hidden;
  float s = 0.0f;
  for (int b = warp; b < parts; b += kReduceWarps) s += rows[static_cast<int64_t>(b) * hidden + f];
  red[warp][lane] = s;
  __syncthreads();
  if (warp != 0) return;
  float t = red[0][lane];
#pragma unroll
  for (int w = 1; w < kReduceWarps; ++w) t += red[w][lane];
  dev::store_out(h + r * hidden + f, t, 1, BF16);
}

__global__ void transpose_kernel(const uint16_t* src, int64_t rows, int64_t cols, uint16_t* dst) {
  __shared__ uint16_t tile[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32, r0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

// The GPU's SMs (cuda::sm_count), at most kMaxBlocks: the bulk kernel's grid.
int grid_sms() { return std::clamp(sm_count(), 1, kMaxBlocks); }

// The register kernel's grid.
int mlp_blocks() { return std::clamp(kBlocksPerSm * grid_sms(), 1, kMaxBlocks); }

// Single rows at hidden 1024 through the bulk kernel; off only in tests (set_fused_mlp_bulk), which
// compare it with the register kernel.
std::atomic<bool> g_bulk{true};

template <bool BF16>
cudaError_t launch_bulk(const MlpParams& p, cudaStream_t s) {
  auto* kernel = fused_mlp_bulk_kernel<4, BF16>;
  static const cudaError_t attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkRingBytes);
  if (attr != cudaSuccess) return attr;
  return launch(kernel, dim3(grid_sms()), dim3(kBulkThreads), kBulkRingBytes, s, p);
}

template <bool BF16>
cudaError_t launch_mlp(const MlpParams& p, int rows, int blocks, cudaStream_t s) {
  const dim3 grid(blocks), block(kMlpWarps * 32);
  cudaError_t e = cudaSuccess;
  if (rows == 1 && p.hidden == 1024 && g_bulk.load()) {
    blocks = grid_sms();
    e = launch_bulk<BF16>(p, s);
  } else if (rows == 2) {
    e = launch(fused_mlp_kernel<4, BF16, 1, true, 2>, grid, block, 0, s, p);  // 2 ahead spills
  } else if (p.hidden == 2048) {
    e = launch(fused_mlp_kernel<8, BF16, 1, true, 1>, grid, block, 0, s, p);
  } else {  // one row at hidden 1024 without the bulk kernel (tests): two features ahead
    e = launch(fused_mlp_kernel<4, BF16, 2, false, 1>, grid, block, 0, s, p);
  }
  if (e != cudaSuccess) return e;
  // Only after one row at hidden 2048 (Breeze's backbone: −0.05 ms per frame). After the bulk
  // kernel (the depth decoder's single row) q/k/v becomes resident 3 µs earlier but takes longer
  // after the wait (+0.04 ms per frame), and after two rows at hidden 1024 (guidance's depth
  // decoder) it costs +0.39 ms per frame.
  const bool early = rows == 1 && p.hidden == 2048;
  return launch(early ? mlp_reduce_kernel<BF16, true> : mlp_reduce_kernel<BF16, false>,
                dim3(static_cast<unsigned>(p.hidden / 32), static_cast<unsigned>(rows)), dim3(kReduceWarps * 32), 0, s,
                static_cast<const float*>(p.partial), blocks, p.hidden, p.h);
}

}  // namespace

int fused_mlp_max_rows(int64_t hidden, int64_t intermediate) {
  if (intermediate <= 0) return 0;
  return hidden == 1024 ? 2 : hidden == 2048 ? 1 : 0;
}

bool fused_mlp_supported(int64_t hidden, int64_t intermediate, int rows) {
  return rows >= 1 && rows <= fused_mlp_max_rows(hidden, intermediate);
}

size_t fused_mlp_partial_floats(int64_t hidden, int rows) {
  // Both kernels' grids (the register kernel's mlp_blocks() ≥ the bulk kernel's one block per SM).
  return static_cast<size_t>(rows) * static_cast<size_t>(mlp_blocks()) * static_cast<size_t>(hidden);
}

void set_fused_mlp_bulk(bool on) { g_bulk.store(on); }

Status fused_mlp(const FusedMlpArgs& a, cudaStream_t s) {
  const int64_t H = a.gate.cols, I = a.gate.rows;
  if (!fused_mlp_supported(H, I, a.rows) || a.up.rows != I || a.up.cols != H || a.down_t.rows != I || a.down_t.cols != H)
    return make_error(ErrorCode::kInternal, "fused_mlp: unsupported or mismatched shapes (hidden " + std::to_string(H) +
                                                ", intermediate " + std::to_string(I) + ", rows " +
                                                std::to_string(a.rows) + ")");
  if (!a.h || !a.norm_weight || !a.partial || !aligned16(a.h) || !aligned16(a.norm_weight) || !aligned16(a.gate.data) ||
      !aligned16(a.up.data) || !aligned16(a.down_t.data))
    return make_error(ErrorCode::kInternal, "fused_mlp: missing or unaligned buffers");
  MlpParams p{H, a.h, a.norm_weight, a.norm_eps, a.gate.data, a.up.data, a.down_t.data, I, a.partial, {}};
  for (int i = 0; i < 4; ++i) p.prefetch[i] = a.prefetch[i];
  CHORUS_CUDA_TRY(a.bf16 ? launch_mlp<true>(p, a.rows, mlp_blocks(), s) : launch_mlp<false>(p, a.rows, mlp_blocks(), s));
  return ok_status();
}

Status transpose_matrix(const DeviceMatrix& src, uint16_t* dst, cudaStream_t s) {
  if (!src.data || !dst || src.rows <= 0 || src.cols <= 0) return make_error(ErrorCode::kInternal, "transpose_matrix: empty");
  const dim3 grid(static_cast<unsigned>((src.cols + 31) / 32), static_cast<unsigned>((src.rows + 31) / 32));
  transpose_kernel<<<grid, dim3(32, 8), 0, s>>>(src.data, src.rows, src.cols, dst);
  CHORUS_CUDA_LAUNCHED("transpose_kernel");
  return ok_status();
}

}  // namespace chorus::cuda
