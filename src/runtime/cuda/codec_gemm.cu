// The codec decoder's batch-invariant GEMM (conv_ops.h) on tensor cores: 3xTF32 mma.sync.m16n8k8,
// or one bf16 mma.sync.m16n8k16 per 16 k, with the per-element arithmetic fixed by
// codec_elements.h. Two data flows give the same bits:
//   - the tiles of codec_gemm_tiles.h (both precisions, every size): A and B go to shared memory
//     as f32 through cp.async (16 bytes where aligned, else 4) in a multi-stage pipeline, and
//     fragments are read from shared memory and split (or rounded to bf16) in registers;
//   - the wide tiles of codec_gemm_wide.h (bf16, the large products; codec_gemm_wide.cu): each
//     value is rounded to bf16 once, in shared memory, and fragments come by ldmatrix; or, with
//     operands already stored as bf16 (gemm_bf16_operands), copied straight into the buffers.
// A block walks one group of K chunks: holding them all it adds the chunk sums itself, else it
// writes them for a second kernel that adds them in order. The tile and the group follow the
// problem (enough warps to fill the SMs: large tiles for large products, split K chunks and thin
// tiles for the products of a few streams), which changes the speed, never a bit.
#include <string>

#include "runtime/cuda/codec_gemm_device.cuh"
#include "runtime/cuda/codec_gemm_wide.h"
#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

using namespace gemm_kernels;

// A grid of (column tiles, row tiles, chunk groups); each block computes its tile (BlockPlace) for
// chunk group blockIdx.z. Stage it of the group sits in buffer it % kStages; at iteration it the
// copies of stage it + kStages − 1 are issued into the buffer that iteration it − 1 read (every
// warp is past it: the barrier).
// Blocks per SM the registers must allow: the 4-warp tile fits four in shared memory.
template <class T>
constexpr int kMinBlocks = T::kThreads == 128 ? 4 : 2;

template <class T, bool TA, bool TB, GemmPrecision P>
__global__ void __launch_bounds__(T::kThreads, kMinBlocks<T>) gemm_mma_kernel(GemmArgs g, bool vec_a, bool vec_b) {
  using S = GemmStage<T, TA, TB, P>;
  extern __shared__ __align__(16) float smem[];
  const BlockPlace<T> at(g);

  float acc[T::MT][T::NT][4], sum[T::MT][T::NT][4];
  warp_zero<T>(acc, sum);

  AsyncCopy copy;
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < at.stages)
      gemm_load_stage<T, TA, TB, P>(g, smem + s * S::floats, at.m0, at.n0, at.k_begin + s * T::BK, at.k_end, at.tid, vec_a, vec_b, copy);
    cp_async_commit();
  }
  for (int it = 0; it < at.stages; ++it) {
    cp_async_wait<T::kStages - 2>();
    __syncthreads();
    const int next = it + T::kStages - 1;
    if (next < at.stages)
      gemm_load_stage<T, TA, TB, P>(g, smem + (next % T::kStages) * S::floats, at.m0, at.n0, at.k_begin + next * T::BK, at.k_end,
                                 at.tid, vec_a, vec_b, copy);
    cp_async_commit();
    if (at.idle) continue;
    const float* st = smem + (it % T::kStages) * S::floats;
    const int64_t k0 = at.k_begin + static_cast<int64_t>(it) * T::BK;
    const int steps = gemm_stage_steps<T, P>(k0, at.k_end);
    if constexpr (P == GemmPrecision::kBf16) {
#pragma unroll
      for (int ks = 0; ks < T::BK / 16; ++ks) {
        if (ks >= steps) break;
        uint32_t b[T::NT][2];
#pragma unroll
        for (int j = 0; j < T::NT; ++j) {
          float v[4];
          gemm_frag_b16<T, TA, TB>(st, at.lane, at.col0 + j * 8, ks * 16, v);
          pack_fragment<2>(v, b[j]);
        }
#pragma unroll
        for (int i = 0; i < T::MT; ++i) {
          float v[8];
          uint32_t a[4];
          gemm_frag_a16<T, TA, TB>(st, at.lane, at.row0 + i * 16, ks * 16, v);
          pack_fragment<4>(v, a);
#pragma unroll
          for (int j = 0; j < T::NT; ++j) mma_bf16(acc[i][j], a, b[j]);
        }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < T::kSteps; ++ks) {
        if (ks >= steps) break;
        uint32_t b_hi[T::NT][2], b_lo[T::NT][2];
#pragma unroll
        for (int j = 0; j < T::NT; ++j) {
          float b[2];
          gemm_frag_b<T, TA, TB>(st, at.lane, at.col0 + j * 8, ks * kGemmKStep, b);
          split_fragment(b, b_hi[j], b_lo[j]);
        }
#pragma unroll
        for (int i = 0; i < T::MT; ++i) {
          float a[4];
          uint32_t a_hi[4], a_lo[4];
          gemm_frag_a<T, TA, TB>(st, at.lane, at.row0 + i * 16, ks * kGemmKStep, a);
          split_fragment(a, a_hi, a_lo);
#pragma unroll
          for (int j = 0; j < T::NT; ++j) mma_3xtf32(acc[i][j], a_hi, a_lo, b_hi[j], b_lo[j]);
        }
      }
    }
    if (gemm_stage_ends_chunk<T>(k0, at.k_end))
      warp_end_chunk<T>(g, acc, sum, at.m0 + at.row0, at.n0 + at.col0, at.lane, k0 / kGemmKChunk);
  }
  cp_async_wait<0>();
  if (at.idle || !gemm_whole_k(g)) return;
  warp_store<T>(g, sum, at.m0 + at.row0, at.n0 + at.col0, at.lane);
}

__global__ void gemm_reduce_kernel(GemmArgs g) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < g.M * g.N) gemm_reduce_element(g, i);
}

template <class T, bool TA, bool TB, GemmPrecision P>
Status launch_mma(dim3 grid, const GemmArgs& g, bool vec_a, bool vec_b, cudaStream_t s) {
  constexpr size_t bytes = GemmStage<T, TA, TB, P>::smem_bytes;
  if constexpr (bytes > 48 * 1024) {
    static const cudaError_t attr = cudaFuncSetAttribute(
        gemm_mma_kernel<T, TA, TB, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    CHORUS_TRY(check(attr, "codec gemm: shared memory"));
  }
  gemm_mma_kernel<T, TA, TB, P><<<grid, T::kThreads, bytes, s>>>(g, vec_a, vec_b);
  return check(cudaGetLastError(), "codec gemm");
}

template <class T, GemmPrecision P>
Status launch_layout(dim3 grid, bool ta, bool tb, const GemmArgs& g, bool va, bool vb, cudaStream_t s) {
  if (ta && tb) return launch_mma<T, true, true, P>(grid, g, va, vb, s);
  if (ta) return launch_mma<T, true, false, P>(grid, g, va, vb, s);
  if (tb) return launch_mma<T, false, true, P>(grid, g, va, vb, s);
  return launch_mma<T, false, false, P>(grid, g, va, vb, s);
}

template <class T>
Status launch_tiles(bool ta, bool tb, const GemmArgs& g, cudaStream_t s) {
  const int64_t bx = (g.N + T::BN - 1) / T::BN, by = (g.M + T::BM - 1) / T::BM, bz = gemm_groups(g);
  if (bx > 0x7fffffffLL || by > 65535 || bz > 65535)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one launch");
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by), static_cast<unsigned>(bz));
  const bool va = gemm_vector_ok(g.A, g.lda), vb = gemm_vector_ok(g.B, g.ldb);
  if (g.precision == GemmPrecision::kBf16) return launch_layout<T, GemmPrecision::kBf16>(grid, ta, tb, g, va, vb, s);
  return launch_layout<T, GemmPrecision::kF32>(grid, ta, tb, g, va, vb, s);
}

}  // namespace

namespace gemm_kernels {

GemmArgs product_args(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C, int64_t ldc,
                      GemmPrecision precision) {
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.beta = beta;
  g.C = C;
  g.ldc = ldc;
  g.chunks = gemm_chunks(K);
  g.precision = precision;
  return g;
}

Status spread_chunks(GemmArgs& g, GemmTile tile, int64_t group, float* partial, size_t partial_floats) {
  g.group = group == 0 ? gemm_group(tile, g.M, g.N, g.chunks, sm_count()) : (group < g.chunks ? group : g.chunks);
  if (gemm_whole_k(g)) return ok_status();
  const size_t need = static_cast<size_t>(g.chunks * g.M * g.N);
  if (!partial || partial_floats < need)
    return make_error(ErrorCode::kInternal, "codec gemm: split-K scratch too small (" + std::to_string(partial_floats) +
                                                " floats, " + std::to_string(need) + " needed)");
  g.partial = partial;
  return ok_status();
}

Status reduce_chunks(const GemmArgs& g, cudaStream_t s) {
  if (gemm_whole_k(g)) return ok_status();
  const int64_t total = g.M * g.N;
  if ((total + 255) / 256 > 0x7fffffffLL)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one reduce launch");
  gemm_reduce_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(g);
  return check(cudaGetLastError(), "codec gemm reduce");
}

}  // namespace gemm_kernels

size_t gemm_partial_floats(int64_t M, int64_t N, int64_t K) { return static_cast<size_t>(gemm_partial_bound(M, N, K)); }

Status gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* partial, size_t partial_floats,
            cudaStream_t s, GemmPrecision precision) {
  return gemm_on_path(GemmPath::kAuto, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, partial,
                      partial_floats, s, 0, precision);
}


Status gemm_on_path(GemmPath path, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                    float* partial, size_t partial_floats, cudaStream_t s, int64_t group, GemmPrecision precision) {
  if (M < 0 || N < 0 || K < 0) return make_error(ErrorCode::kInvalidArgument, "codec gemm: negative dimension");
  if (group < 0) return make_error(ErrorCode::kInvalidArgument, "codec gemm: negative chunk group");
  if (M == 0 || N == 0) return ok_status();
  GemmArgs g = gemm_kernels::product_args(M, N, K, alpha, beta, C, ldc, precision);
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  GemmTile tile = GemmTile::kSmall;
  switch (path) {
    case GemmPath::kAuto:
      tile = precision == GemmPrecision::kBf16 ? gemm_auto_tile_bf16(M, N, g.chunks, sm_count())
                                                : gemm_auto_tile(M, N, g.chunks, sm_count());
      break;
    case GemmPath::kWide:
      tile = GemmTile::kWide;
      break;
    case GemmPath::kWide64:
      tile = GemmTile::kWide64;
      break;
    case GemmPath::kLarge:
      tile = GemmTile::kLarge;
      break;
    case GemmPath::kSmall:
      tile = GemmTile::kSmall;
      break;
    case GemmPath::kThin:
      tile = gemm_thin_tile(M, N, g.chunks, gemm_target_warps(sm_count()));
      break;
    case GemmPath::kThin8:
      tile = GemmTile::kThin8;
      break;
    case GemmPath::kThin16:
      tile = GemmTile::kThin16;
      break;
    case GemmPath::kThin32:
      tile = GemmTile::kThin32;
      break;
    default:
      return make_error(ErrorCode::kInvalidArgument, "codec gemm: unknown path");
  }
  CHORUS_TRY(gemm_kernels::spread_chunks(g, tile, group, partial, partial_floats));
  switch (tile) {
    case GemmTile::kLarge:
      CHORUS_TRY(launch_tiles<GemmLarge>(trans_a, trans_b, g, s));
      break;
    case GemmTile::kSmall:
      CHORUS_TRY(launch_tiles<GemmSmall>(trans_a, trans_b, g, s));
      break;
    case GemmTile::kThin8:
      CHORUS_TRY(launch_tiles<GemmThin8>(trans_a, trans_b, g, s));
      break;
    case GemmTile::kThin16:
      CHORUS_TRY(launch_tiles<GemmThin16>(trans_a, trans_b, g, s));
      break;
    case GemmTile::kThin32:
      CHORUS_TRY(launch_tiles<GemmThin32>(trans_a, trans_b, g, s));
      break;
    case GemmTile::kWide:
    case GemmTile::kWide64:
      CHORUS_TRY(gemm_kernels::launch_wide_tiles(tile, trans_a, trans_b, g, s));
      break;
  }
  return gemm_kernels::reduce_chunks(g, s);
}


}  // namespace chorus::cuda::codec_ops
