// Device pieces shared by the codec GEMM's kernels (codec_gemm.cu: the tiles of
// codec_gemm_tiles.h; codec_gemm_wide.cu: the wide bf16 tiles of codec_gemm_wide.h): cp.async,
// the tensor-core instructions, ldmatrix, where a block and its warp stand, and a warp's chunk
// ends and stores; and the launches one file makes for the other. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/codec_gemm_tiles.h"

namespace chorus::cuda::codec_ops::gemm_kernels {

// cp.async with a source size (the rest of the copy zero-filled): .cg (L2 only) for 16 bytes, .ca
// for 4 (the only size .cg lacks). Host-callable so that the tile functions stay host-device.
struct AsyncCopy {
  CHORUS_HD void operator()(float* dst, const float* src, int bytes, int src_bytes) const {
#if defined(__CUDA_ARCH__)
    if (bytes == 16) {
      dev::cp_async16(dst, src, src_bytes);
    } else {
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
    }
#else
    (void)dst, (void)src, (void)bytes, (void)src_bytes;
#endif
  }
};

using dev::cp_async_commit;
using dev::cp_async_wait;

// d += a·b on a 16 × 8 × 8 tile (operands as tf32 bit patterns, fragments as codec_gemm_tiles.h).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a·b on a 16 × 8 × 16 tile of bf16 pairs (fragments as codec_gemm_tiles.h, mma16_*_at).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two operands rounded to bf16 (nearest even) in one register: x0 in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float x0, float x1) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(x1), "f"(x0));
  return d;
}

template <int kN>
__device__ __forceinline__ void pack_fragment(const float (&x)[2 * kN], uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) r[i] = pack_bf16(x[2 * i], x[2 * i + 1]);
}

// One k-step of one accumulator: the three products in the order of codec_elements.h.
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                           const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
  mma_tf32(d, a_lo, b_hi);
  mma_tf32(d, a_hi, b_lo);
  mma_tf32(d, a_hi, b_hi);
}

template <int kN>
__device__ __forceinline__ void split_fragment(const float (&x)[kN], uint32_t (&hi)[kN], uint32_t (&lo)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    float h, l;
    tf32_split(x[i], h, l);
    hi[i] = __float_as_uint(h);
    lo[i] = __float_as_uint(l);
  }
}

// Where a block and its warp stand: the block's tile origin in C (gemm_tile_of_block), its chunk
// group's k range and stage count, the warp's origin in the tile, and whether the warp lies wholly
// past C's edge (it then only stages data for the others).
template <class T>
struct BlockPlace {
  int tid, lane, warp;
  int64_t n0 = 0, m0 = 0, k_begin = 0, k_end = 0;
  int stages, row0 = 0, col0 = 0;
  bool idle;
  __device__ explicit BlockPlace(const GemmArgs& g)
      : tid(static_cast<int>(threadIdx.x)), lane(tid & 31), warp(tid >> 5) {
    int64_t mt = 0, nt = 0;
    gemm_tile_of_block(static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x, gridDim.y, mt, nt);
    m0 = mt * T::BM;
    n0 = nt * T::BN;
    gemm_group_k(g, blockIdx.z, k_begin, k_end);
    stages = static_cast<int>((k_end - k_begin + T::BK - 1) / T::BK);
    gemm_warp_origin<T>(warp, row0, col0);
    idle = m0 + row0 >= g.M || n0 + col0 >= g.N;
  }
};

// A warp's accumulators at the end of chunk `chunk` (gemm_end_chunk for each 16 × 8 tile of the
// warp's tile at (m, n) of C), and its sums through the epilogue once every chunk is in.
template <class T>
__device__ __forceinline__ void warp_end_chunk(const GemmArgs& g, float (&acc)[T::MT][T::NT][4],
                                               float (&sum)[T::MT][T::NT][4], int64_t m, int64_t n, int lane,
                                               int64_t chunk) {
#pragma unroll
  for (int i = 0; i < T::MT; ++i)
#pragma unroll
    for (int j = 0; j < T::NT; ++j) gemm_end_chunk(g, acc[i][j], sum[i][j], m + i * 16, n + j * 8, lane, chunk);
}
template <class T>
__device__ __forceinline__ void warp_store(const GemmArgs& g, const float (&sum)[T::MT][T::NT][4], int64_t m, int64_t n,
                                           int lane) {
#pragma unroll
  for (int i = 0; i < T::MT; ++i)
#pragma unroll
    for (int j = 0; j < T::NT; ++j) gemm_store_frag(g, sum[i][j], m + i * 16, n + j * 8, lane);
}
template <class T>
__device__ __forceinline__ void warp_zero(float (&acc)[T::MT][T::NT][4], float (&sum)[T::MT][T::NT][4]) {
#pragma unroll
  for (int i = 0; i < T::MT; ++i)
#pragma unroll
    for (int j = 0; j < T::NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = sum[i][j][q] = 0.0f;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// The wide tiles' launches (codec_gemm_wide.cu) for gemm_on_path: `tile` kWide or kWide64.
Status launch_wide_tiles(GemmTile tile, bool ta, bool tb, const GemmArgs& g, cudaStream_t s);
// A product's arguments but for its operands (the caller's A and B, or A16 and B16, and their
// leading dimensions): sizes, alpha, beta, C, the chunk count, the precision.
GemmArgs product_args(int64_t M, int64_t N, int64_t K, float alpha, float beta, float* C, int64_t ldc,
                      GemmPrecision precision);
// g.group from `group` (0: gemm_group's choice for the tile) and, when a block holds fewer than
// all chunks, g.partial (kInternal when the scratch is too small).
Status spread_chunks(GemmArgs& g, GemmTile tile, int64_t group, float* partial, size_t partial_floats);
// The chunk sums of a launch that spread them over blocks, added in order (nothing otherwise).
Status reduce_chunks(const GemmArgs& g, cudaStream_t s);

}  // namespace chorus::cuda::codec_ops::gemm_kernels
