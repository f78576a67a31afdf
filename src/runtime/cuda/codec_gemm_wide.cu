// The codec GEMM's wide bf16 tiles (codec_gemm_wide.h): 128 or 64 × 128 tiles of 8 warps whose
// fragments come by ldmatrix from bf16 stages, fed either from f32 operands (each thread copies
// its share into a cp.async ring and rounds it to bf16 once) or from operands already stored as
// bf16 (gemm_bf16_operands: 16-byte chunks straight into the stages). The same bits as the other
// tiles (codec_elements.h's bf16 contract); codec_gemm.cu picks the tile.
#include <string>

#include "runtime/cuda/codec_gemm_device.cuh"
#include "runtime/cuda/codec_gemm_wide.h"
#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

using namespace gemm_kernels;

// A warp's k-steps of one bf16 stage (WideStage layout): fragments by ldmatrix (.trans where the
// stored rows are k), one mma per 16 × 8 tile and step.
template <class T, bool TA, bool TB>
__device__ __forceinline__ void wide_multiply(const uint16_t* st, int lane, int row0, int col0, int steps,
                                              float (&acc)[T::MT][T::NT][4]) {
#pragma unroll
  for (int ks = 0; ks < T::BK / 16; ++ks) {
    if (ks >= steps) break;
    uint32_t a[T::MT][4], b[T::NT][2];
#pragma unroll
    for (int i = 0; i < T::MT; ++i) {
      const uint16_t* p = st + wide_a_lane<T, TA, TB>(lane, row0 + i * 16, ks * 16);
      if constexpr (TA)
        ldmatrix_x4_trans(a[i], p);
      else
        ldmatrix_x4(a[i], p);
    }
#pragma unroll
    for (int j = 0; j < T::NT; j += 2) {
      uint32_t r[4];
      const uint16_t* p = st + wide_b_lane<T, TA, TB>(lane, col0 + j * 8, ks * 16);
      if constexpr (TB)
        ldmatrix_x4(r, p);
      else
        ldmatrix_x4_trans(r, p);
      b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
    }
#pragma unroll
    for (int i = 0; i < T::MT; ++i)
#pragma unroll
      for (int j = 0; j < T::NT; ++j) mma_bf16(acc[i][j], a[i], b[j]);
  }
}

// The wide bf16 tiles (codec_gemm_wide.h). Stage s is copied into ring slot s % kStages; at
// iteration it the copies of stage it + kStages − 1 are issued into the slot of stage it − 1 (its
// thread converted it before the last barrier), the warps multiply stage it from bf16 buffer
// it % 2, and each thread converts its own values of stage it + 1, once its copies have landed,
// into the other buffer (which every warp left at the last barrier).
template <class T, bool TA, bool TB>
__global__ void __launch_bounds__(T::kThreads, T::MT == 4 ? 1 : 2) gemm_wide_kernel(GemmArgs g, bool vec_a, bool vec_b) {
  using S = WideStage<T, TA, TB>;
  extern __shared__ __align__(16) unsigned char wide_smem[];
  uint16_t* bufs = reinterpret_cast<uint16_t*>(wide_smem);
  float* ring = reinterpret_cast<float*>(wide_smem + S::bf16_bytes);
  const BlockPlace<T> at(g);

  float acc[T::MT][T::NT][4], sum[T::MT][T::NT][4];
  warp_zero<T>(acc, sum);

  AsyncCopy copy;
  auto issue = [&](int s) {
    const int64_t k0 = at.k_begin + static_cast<int64_t>(s) * T::BK;
    const int slot = s % T::kStages;
    if (wide_stage_inside<T>(g, at.m0, at.n0, k0, at.k_end, vec_a, vec_b)) {
#pragma unroll
      for (int e = 0; e < S::quads; ++e) {
        const bool b = e >= S::a_quads;
        const int q = b ? e - S::a_quads : e;
        wide_copy_inside<T, TA, TB>(g, b, at.m0, at.n0, k0, at.tid, q, ring + wide_ring_at<T, TA, TB>(slot, b, at.tid, q), copy);
      }
      return;
    }
#pragma unroll
    for (int q = 0; q < S::a_quads; ++q)
      wide_copy<T, TA, TB>(g, false, at.m0, at.n0, k0, at.k_end, at.tid, q, vec_a,
                           ring + wide_ring_at<T, TA, TB>(slot, false, at.tid, q), copy);
#pragma unroll
    for (int q = 0; q < S::b_quads; ++q)
      wide_copy<T, TA, TB>(g, true, at.m0, at.n0, k0, at.k_end, at.tid, q, vec_b, ring + wide_ring_at<T, TA, TB>(slot, true, at.tid, q),
                           copy);
  };
  auto convert = [&](int s) {
    const int slot = s % T::kStages;
    uint16_t* buf = bufs + (s & 1) * S::elems;
#pragma unroll
    for (int e = 0; e < S::quads; ++e) {
      const bool b = e >= S::a_quads;
      const int q = b ? e - S::a_quads : e;
      const float4 v = *reinterpret_cast<const float4*>(ring + wide_ring_at<T, TA, TB>(slot, b, at.tid, q));
      *reinterpret_cast<uint2*>(buf + wide_store_at<T, TA, TB>(b, at.tid, q)) =
          make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
  };
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < at.stages) issue(s);
    cp_async_commit();
  }
  cp_async_wait<T::kStages - 2>();
  if (at.stages > 0) convert(0);
  __syncthreads();
  for (int it = 0; it < at.stages; ++it) {
    if (it + T::kStages - 1 < at.stages) issue(it + T::kStages - 1);
    cp_async_commit();
    const uint16_t* st = bufs + (it & 1) * S::elems;
    const int64_t k0 = at.k_begin + static_cast<int64_t>(it) * T::BK;
    if (!at.idle) {
      wide_multiply<T, TA, TB>(st, at.lane, at.row0, at.col0, gemm_stage_steps<T, GemmPrecision::kBf16>(k0, at.k_end), acc);
      if (gemm_stage_ends_chunk<T>(k0, at.k_end))
        warp_end_chunk<T>(g, acc, sum, at.m0 + at.row0, at.n0 + at.col0, at.lane, k0 / kGemmKChunk);
    }
    cp_async_wait<T::kStages - 2>();
    if (it + 1 < at.stages) convert(it + 1);
    __syncthreads();
  }
  cp_async_wait<0>();
  if (at.idle || !gemm_whole_k(g)) return;
  warp_store<T>(g, sum, at.m0 + at.row0, at.n0 + at.col0, at.lane);
}

// cp.async of 16 bytes with a source size (zero-filled past it), bf16 values.
struct AsyncCopy16 {
  __device__ void operator()(uint16_t* dst, const uint16_t* src, int bytes, int src_bytes) const {
    (void)bytes;
    dev::cp_async16(dst, src, src_bytes);
  }
};

// The wide tiles on bf16 operands (gemm_bf16_operands): stage it sits in buffer it % kStages; at
// iteration it the copies of stage it + kStages − 1 go into the buffer that iteration it − 1 read
// (every warp is past it: the barrier).
template <class T>
__global__ void __launch_bounds__(T::kThreads, T::MT == 4 ? 1 : 2) gemm_wide16_kernel(GemmArgs g) {
  using S = WideStage<T, false, false>;
  using W = Wide16Stage<T>;
  extern __shared__ __align__(16) unsigned char wide_smem[];
  uint16_t* bufs = reinterpret_cast<uint16_t*>(wide_smem);
  const BlockPlace<T> at(g);

  float acc[T::MT][T::NT][4], sum[T::MT][T::NT][4];
  warp_zero<T>(acc, sum);

  AsyncCopy16 copy;
  auto issue = [&](int s) {
    const int64_t k0 = at.k_begin + static_cast<int64_t>(s) * T::BK;
    uint16_t* st = bufs + (s % T::kStages) * S::elems;
#pragma unroll
    for (int q = 0; q < W::a_chunks; ++q) wide16_copy<T>(g, false, at.m0, at.n0, k0, at.k_end, at.tid, q, st, copy);
#pragma unroll
    for (int q = 0; q < W::b_chunks; ++q) wide16_copy<T>(g, true, at.m0, at.n0, k0, at.k_end, at.tid, q, st, copy);
  };
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < at.stages) issue(s);
    cp_async_commit();
  }
  for (int it = 0; it < at.stages; ++it) {
    cp_async_wait<T::kStages - 2>();
    __syncthreads();
    if (it + T::kStages - 1 < at.stages) issue(it + T::kStages - 1);
    cp_async_commit();
    if (at.idle) continue;
    const int64_t k0 = at.k_begin + static_cast<int64_t>(it) * T::BK;
    wide_multiply<T, false, false>(bufs + (it % T::kStages) * S::elems, at.lane, at.row0, at.col0,
                                   gemm_stage_steps<T, GemmPrecision::kBf16>(k0, at.k_end), acc);
    if (gemm_stage_ends_chunk<T>(k0, at.k_end))
      warp_end_chunk<T>(g, acc, sum, at.m0 + at.row0, at.n0 + at.col0, at.lane, k0 / kGemmKChunk);
  }
  cp_async_wait<0>();
  if (at.idle || !gemm_whole_k(g)) return;
  warp_store<T>(g, sum, at.m0 + at.row0, at.n0 + at.col0, at.lane);
}

template <class T, bool TA, bool TB>
Status launch_wide(dim3 grid, const GemmArgs& g, bool vec_a, bool vec_b, cudaStream_t s) {
  constexpr size_t bytes = WideStage<T, TA, TB>::smem_bytes;
  static_assert(bytes <= 227 * 1024, "the buffers and the ring within one block's share");
  static const cudaError_t attr = cudaFuncSetAttribute(gemm_wide_kernel<T, TA, TB>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  CHORUS_TRY(check(attr, "codec gemm: shared memory"));
  gemm_wide_kernel<T, TA, TB><<<grid, T::kThreads, bytes, s>>>(g, vec_a, vec_b);
  return check(cudaGetLastError(), "codec gemm");
}

template <class T>
Status launch_wide_tile(bool ta, bool tb, const GemmArgs& g, cudaStream_t s) {
  if (g.precision != GemmPrecision::kBf16)
    return make_error(ErrorCode::kInvalidArgument, "codec gemm: the wide tiles take bf16 operands only");
  const int64_t bx = (g.N + T::BN - 1) / T::BN, by = (g.M + T::BM - 1) / T::BM, bz = gemm_groups(g);
  if (bx > 0x7fffffffLL || by > 65535 || bz > 65535)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one launch");
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by), static_cast<unsigned>(bz));
  const bool va = gemm_vector_ok(g.A, g.lda), vb = gemm_vector_ok(g.B, g.ldb);
  if (ta && tb) return launch_wide<T, true, true>(grid, g, va, vb, s);
  if (ta) return launch_wide<T, true, false>(grid, g, va, vb, s);
  if (tb) return launch_wide<T, false, true>(grid, g, va, vb, s);
  return launch_wide<T, false, false>(grid, g, va, vb, s);
}

template <class T>
Status launch_wide16(const GemmArgs& g, cudaStream_t s) {
  const int64_t bx = (g.N + T::BN - 1) / T::BN, by = (g.M + T::BM - 1) / T::BM, bz = gemm_groups(g);
  if (bx > 0x7fffffffLL || by > 65535 || bz > 65535)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one launch");
  constexpr size_t bytes = Wide16Stage<T>::smem_bytes;
  if constexpr (bytes > 48 * 1024) {
    static const cudaError_t attr =
        cudaFuncSetAttribute(gemm_wide16_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    CHORUS_TRY(check(attr, "codec gemm: shared memory"));
  }
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by), static_cast<unsigned>(bz));
  gemm_wide16_kernel<T><<<grid, T::kThreads, bytes, s>>>(g);
  return check(cudaGetLastError(), "codec gemm");
}

}  // namespace

namespace gemm_kernels {

Status launch_wide_tiles(GemmTile tile, bool ta, bool tb, const GemmArgs& g, cudaStream_t s) {
  if (tile == GemmTile::kWide) return launch_wide_tile<GemmWide>(ta, tb, g, s);
  return launch_wide_tile<GemmWide64>(ta, tb, g, s);
}

}  // namespace gemm_kernels

bool gemm_takes_bf16_operands(int64_t M, int64_t N, int64_t K) {
  return gemm_bf16_operands_fit(M, N, K, sm_count());
}

Status gemm_bf16_operands(GemmPath path, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A, int64_t lda,
                          const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, float* partial,
                          size_t partial_floats, cudaStream_t s, int64_t group) {
  if (M < 0 || N < 0 || K < 0 || group < 0)
    return make_error(ErrorCode::kInvalidArgument, "codec gemm: negative dimension or chunk group");
  if (M == 0 || N == 0) return ok_status();
  auto aligned = [](const uint16_t* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  if (K % 8 != 0 || N % 8 != 0 || lda % 8 != 0 || ldb % 8 != 0 || lda < K || ldb < N || !aligned(A) || !aligned(B))
    return make_error(ErrorCode::kInvalidArgument,
                      "codec gemm on bf16 operands: K, N and the leading dimensions must be multiples of 8 and the "
                      "operands 16-byte aligned");
  GemmArgs g = gemm_kernels::product_args(M, N, K, alpha, beta, C, ldc, GemmPrecision::kBf16);
  g.A16 = A;
  g.lda = lda;
  g.B16 = B;
  g.ldb = ldb;
  GemmTile tile = GemmTile::kWide64;
  if (path == GemmPath::kWide)
    tile = GemmTile::kWide;
  else if (path == GemmPath::kAuto && gemm_auto_tile_bf16(M, N, g.chunks, sm_count()) == GemmTile::kWide)
    tile = GemmTile::kWide;
  else if (path != GemmPath::kAuto && path != GemmPath::kWide64)
    return make_error(ErrorCode::kInvalidArgument, "codec gemm on bf16 operands: the wide tiles only");
  CHORUS_TRY(gemm_kernels::spread_chunks(g, tile, group, partial, partial_floats));
  CHORUS_TRY(tile == GemmTile::kWide ? launch_wide16<GemmWide16>(g, s) : launch_wide16<GemmWide16x64>(g, s));
  return gemm_kernels::reduce_chunks(g, s);
}

}  // namespace chorus::cuda::codec_ops
