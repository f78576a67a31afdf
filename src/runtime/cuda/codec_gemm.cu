// The codec decoder's batch-invariant GEMM (conv_ops.h) on tensor cores: 3xTF32 mma.sync.m16n8k8,
// or one bf16 mma.sync.m16n8k16 per 16 k, with the per-element arithmetic fixed by
// codec_elements.h. Two data flows give the same bits:
//   - the tiles of codec_gemm_tiles.h (both precisions, every size): A and B go to shared memory
//     as f32 through cp.async (16 bytes where aligned, else 4) in a multi-stage pipeline, and
//     fragments are read from shared memory and split (or rounded to bf16) in registers;
//   - the wide tiles of codec_gemm_wide.h (bf16, the large products): each value is rounded to
//     bf16 once, in shared memory, and fragments come by ldmatrix; or, with operands already
//     stored as bf16 (gemm_bf16_operands), copied straight into the fragments' buffers.
// A block walks one group of K chunks: holding them all it adds the chunk sums itself, else it
// writes them for a second kernel that adds them in order. The tile and the group follow the
// problem (enough warps to fill the SMs: large tiles for large products, split K chunks and thin
// tiles for the products of a few streams), which changes the speed, never a bit.
#include <string>

#include "runtime/cuda/codec_gemm_tiles.h"
#include "runtime/cuda/codec_gemm_wide.h"
#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

// cp.async with a source size (the rest of the copy zero-filled): .cg (L2 only) for 16 bytes, .ca
// for 4 (the only size .cg lacks). Host-callable so that the tile functions stay host-device.
struct AsyncCopy {
  CHORUS_HD void operator()(float* dst, const float* src, int bytes, int src_bytes) const {
#if defined(__CUDA_ARCH__)
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    if (bytes == 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)src_bytes;
#endif
  }
};

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

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

// Where a block and its warp stand: the block's tile origin in C, its chunk group's k range and
// stage count, the warp's origin in the tile, and whether the warp lies wholly past C's edge (it
// then only stages data for the others).
template <class T>
struct BlockPlace {
  int tid, lane, warp;
  int64_t n0, m0, k_begin = 0, k_end = 0;
  int stages, row0 = 0, col0 = 0;
  bool idle;
  __device__ explicit BlockPlace(const GemmArgs& g)
      : tid(static_cast<int>(threadIdx.x)),
        lane(tid & 31),
        warp(tid >> 5),
        n0(static_cast<int64_t>(blockIdx.x) * T::BN),
        m0(static_cast<int64_t>(blockIdx.y) * T::BM) {
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

// Block (blockIdx.x, blockIdx.y) computes C's tile at (BM·y, BN·x) for chunk group blockIdx.z. Stage
// it of the group sits in buffer it % kStages; at iteration it the copies of stage it + kStages − 1
// are issued into the buffer that iteration it − 1 read (every warp is past it: the barrier).
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
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    (void)bytes;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
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

template <class T, bool TA, bool TB>
Status launch_wide(dim3 grid, const GemmArgs& g, bool vec_a, bool vec_b, cudaStream_t s) {
  constexpr size_t bytes = WideStage<T, TA, TB>::smem_bytes;
  static const cudaError_t attr = cudaFuncSetAttribute(gemm_wide_kernel<T, TA, TB>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  CHORUS_TRY(check(attr, "codec gemm: shared memory"));
  gemm_wide_kernel<T, TA, TB><<<grid, T::kThreads, bytes, s>>>(g, vec_a, vec_b);
  return check(cudaGetLastError(), "codec gemm");
}

template <class T>
Status launch_wide_tiles(bool ta, bool tb, const GemmArgs& g, cudaStream_t s) {
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

// The chunk sums of a launch that spread them over blocks, added in order (nothing otherwise).
Status reduce_chunks(const GemmArgs& g, cudaStream_t s) {
  if (gemm_whole_k(g)) return ok_status();
  const int64_t total = g.M * g.N;
  if ((total + 255) / 256 > 0x7fffffffLL)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one reduce launch");
  gemm_reduce_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(g);
  return check(cudaGetLastError(), "codec gemm reduce");
}

}  // namespace

size_t gemm_partial_floats(int64_t M, int64_t N, int64_t K) { return static_cast<size_t>(gemm_partial_bound(M, N, K)); }

Status gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* partial, size_t partial_floats,
            cudaStream_t s, GemmPrecision precision) {
  return gemm_on_path(GemmPath::kAuto, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, partial,
                      partial_floats, s, 0, precision);
}

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
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.beta = beta;
  g.A16 = A;
  g.lda = lda;
  g.B16 = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.chunks = gemm_chunks(K);
  g.precision = GemmPrecision::kBf16;
  GemmTile tile = GemmTile::kWide64;
  if (path == GemmPath::kWide)
    tile = GemmTile::kWide;
  else if (path == GemmPath::kAuto && gemm_auto_tile_bf16(M, N, g.chunks, sm_count()) == GemmTile::kWide)
    tile = GemmTile::kWide;
  else if (path != GemmPath::kAuto && path != GemmPath::kWide64)
    return make_error(ErrorCode::kInvalidArgument, "codec gemm on bf16 operands: the wide tiles only");
  g.group = group == 0 ? gemm_group(tile, M, N, g.chunks, sm_count()) : (group < g.chunks ? group : g.chunks);
  if (!gemm_whole_k(g)) {
    const size_t need = static_cast<size_t>(g.chunks * M * N);
    if (!partial || partial_floats < need)
      return make_error(ErrorCode::kInternal, "codec gemm: split-K scratch too small (" + std::to_string(partial_floats) +
                                                  " floats, " + std::to_string(need) + " needed)");
    g.partial = partial;
  }
  CHORUS_TRY(tile == GemmTile::kWide ? launch_wide16<GemmWide>(g, s) : launch_wide16<GemmWide64>(g, s));
  return reduce_chunks(g, s);
}

Status gemm_on_path(GemmPath path, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                    float* partial, size_t partial_floats, cudaStream_t s, int64_t group, GemmPrecision precision) {
  if (M < 0 || N < 0 || K < 0) return make_error(ErrorCode::kInvalidArgument, "codec gemm: negative dimension");
  if (group < 0) return make_error(ErrorCode::kInvalidArgument, "codec gemm: negative chunk group");
  if (M == 0 || N == 0) return ok_status();
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.beta = beta;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.chunks = gemm_chunks(K);
  g.precision = precision;
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
  g.group = group == 0 ? gemm_group(tile, M, N, g.chunks, sm_count()) : (group < g.chunks ? group : g.chunks);
  if (!gemm_whole_k(g)) {
    const size_t need = static_cast<size_t>(g.chunks * M * N);
    if (!partial || partial_floats < need)
      return make_error(ErrorCode::kInternal, "codec gemm: split-K scratch too small (" + std::to_string(partial_floats) +
                                                  " floats, " + std::to_string(need) + " needed)");
    g.partial = partial;
  }
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
      CHORUS_TRY(launch_wide_tiles<GemmWide>(trans_a, trans_b, g, s));
      break;
    case GemmTile::kWide64:
      CHORUS_TRY(launch_wide_tiles<GemmWide64>(trans_a, trans_b, g, s));
      break;
  }
  return reduce_chunks(g, s);
}

}  // namespace chorus::cuda::codec_ops
