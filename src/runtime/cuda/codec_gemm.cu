// The codec decoder's batch-invariant SGEMM (conv_ops.h, codec_elements.h): shared-memory tiles,
// register-blocked outputs, K cut into fixed chunks whose sums a second kernel adds in order. The
// per-element arithmetic is fixed by codec_elements.h; this file only launches it. The tile shape
// follows the problem size (large tiles when there are enough of them to fill the GPU twice; for
// at most kGemmSkinnyMaxN columns a kernel parallel over rows and chunks instead of tiles, and for
// at most that many rows the same kernel on the transposed product), which changes the speed, never
// a result.
#include <string>

#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

template <class T, bool TA, bool TB>
__global__ void __launch_bounds__(T::kThreads) gemm_kernel(GemmArgs g) {
  __shared__ __align__(16) float As[T::kSmemA];
  __shared__ __align__(16) float Bs[T::kSmemB];
  float acc[T::TM][T::TN];
#pragma unroll
  for (int i = 0; i < T::TM; ++i)
#pragma unroll
    for (int j = 0; j < T::TN; ++j) acc[i][j] = 0.0f;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::BM, n0 = static_cast<int64_t>(blockIdx.x) * T::BN;
  const int64_t split = blockIdx.z;
  int64_t k_begin = 0, k_end = 0;
  gemm_chunk(g, split, k_begin, k_end);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += T::BK) {
    gemm_load_stage<T, TA, TB>(g, As, Bs, m0, n0, k0, k_end, tid);
    __syncthreads();
    gemm_mac_stage<T>(As, Bs, acc, tid);
    __syncthreads();
  }
  gemm_store<T>(g, acc, m0, n0, split, tid);
}

// The same outputs and arithmetic for N <= kGemmSkinnyMaxN: one block per (32 rows, chunk), all
// columns at once, the next stage fetched into registers while the current one is multiplied.
template <class T, bool TA, bool TB>
__global__ void __launch_bounds__(T::kThreads) gemm_skinny_kernel(GemmArgs g) {
  __shared__ __align__(16) float As[T::kSmemA];
  __shared__ __align__(16) float Bs[T::kSmemB];
  float acc[T::TM][T::TN];
#pragma unroll
  for (int i = 0; i < T::TM; ++i)
#pragma unroll
    for (int j = 0; j < T::TN; ++j) acc[i][j] = 0.0f;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * T::BM;
  const int64_t split = blockIdx.y;
  int64_t k_begin = 0, k_end = 0;
  gemm_chunk(g, split, k_begin, k_end);
  float ra[T::kPerA], rb[T::kPerB];
  if (k_begin < k_end) gemm_fetch_stage<T, TA, TB>(g, ra, rb, m0, 0, k_begin, k_end, tid);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += T::BK) {
    gemm_put_stage<T, TA, TB>(As, Bs, ra, rb, tid);
    __syncthreads();
    if (k0 + T::BK < k_end) gemm_fetch_stage<T, TA, TB>(g, ra, rb, m0, 0, k0 + T::BK, k_end, tid);
    gemm_mac_stage<T>(As, Bs, acc, tid, gemm_stage_steps<T>(k0, k_end));
    __syncthreads();
  }
  gemm_store<T>(g, acc, m0, 0, split, tid);
}

__global__ void gemm_reduce_kernel(GemmArgs g) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < g.M * g.N) gemm_reduce_element(g, i);
}

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 132;
  return sms;
}

template <class T>
Status launch_tiles(bool ta, bool tb, const GemmArgs& g, cudaStream_t s) {
  const int64_t bx = (g.N + T::BN - 1) / T::BN, by = (g.M + T::BM - 1) / T::BM;
  if (bx > 0x7fffffffLL || by > 65535 || g.splits > 65535)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one launch");
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(by), static_cast<unsigned>(g.splits));
  if (ta && tb) gemm_kernel<T, true, true><<<grid, T::kThreads, 0, s>>>(g);
  else if (ta) gemm_kernel<T, true, false><<<grid, T::kThreads, 0, s>>>(g);
  else if (tb) gemm_kernel<T, false, true><<<grid, T::kThreads, 0, s>>>(g);
  else gemm_kernel<T, false, false><<<grid, T::kThreads, 0, s>>>(g);
  return check(cudaGetLastError(), "codec gemm");
}

template <class T>
Status launch_skinny(bool ta, bool tb, const GemmArgs& g, cudaStream_t s) {
  const int64_t bx = (g.M + T::BM - 1) / T::BM;
  if (g.N > T::BN || bx > 0x7fffffffLL || g.splits > 65535)
    return make_error(ErrorCode::kOutOfRange, "codec gemm: matrix too large for one skinny launch");
  const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(g.splits));
  if (ta && tb) gemm_skinny_kernel<T, true, true><<<grid, T::kThreads, 0, s>>>(g);
  else if (ta) gemm_skinny_kernel<T, true, false><<<grid, T::kThreads, 0, s>>>(g);
  else if (tb) gemm_skinny_kernel<T, false, true><<<grid, T::kThreads, 0, s>>>(g);
  else gemm_skinny_kernel<T, false, false><<<grid, T::kThreads, 0, s>>>(g);
  return check(cudaGetLastError(), "codec gemm (skinny)");
}

}  // namespace

size_t gemm_partial_floats(int64_t M, int64_t N, int64_t K) {
  const int64_t splits = gemm_splits(K);
  return splits > 1 ? static_cast<size_t>(splits * M * N) : 0;
}

Status gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, float* partial, size_t partial_floats,
            cudaStream_t s) {
  return gemm_on_path(GemmPath::kAuto, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, partial,
                      partial_floats, s);
}

Status gemm_on_path(GemmPath path, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                    float* partial, size_t partial_floats, cudaStream_t s) {
  if ((path == GemmPath::kSkinny && N > kGemmSkinnyMaxN) || (path == GemmPath::kSkinnyRows && M > kGemmSkinnyMaxN))
    return make_error(ErrorCode::kInvalidArgument, "codec gemm: the skinny kernel takes at most " +
                                                       std::to_string(kGemmSkinnyMaxN) + " columns (or rows)");
  if (M < 0 || N < 0 || K < 0) return make_error(ErrorCode::kInvalidArgument, "codec gemm: negative dimension");
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
  g.splits = gemm_splits(K);
  if (g.splits > 1) {
    if (!partial || partial_floats < gemm_partial_floats(M, N, K))
      return make_error(ErrorCode::kInternal, "codec gemm: split-K scratch too small (" + std::to_string(partial_floats) +
                                                  " floats, " + std::to_string(gemm_partial_floats(M, N, K)) + " needed)");
    g.partial = partial;
  }
  // K == 0 still runs one (empty) chunk so that C gets the epilogue of a zero sum.
  const int64_t large_tiles = (M + GemmTileLarge::BM - 1) / GemmTileLarge::BM * ((N + GemmTileLarge::BN - 1) / GemmTileLarge::BN) * g.splits;
  if (path == GemmPath::kAuto && N <= kGemmSkinnyMaxN) path = GemmPath::kSkinny;
  else if (path == GemmPath::kAuto && M <= kGemmSkinnyMaxN) path = GemmPath::kSkinnyRows;
  const bool rows = path == GemmPath::kSkinnyRows;
  const GemmArgs sk = rows ? gemm_swapped(g) : g;
  const bool sta = rows ? !trans_b : trans_a, stb = rows ? !trans_a : trans_b;
  if (path == GemmPath::kTiles || path == GemmPath::kAuto) {
    if (large_tiles >= 2 * sm_count()) CHORUS_TRY(launch_tiles<GemmTileLarge>(trans_a, trans_b, g, s));
    else CHORUS_TRY(launch_tiles<GemmTileSmall>(trans_a, trans_b, g, s));
  } else if (sk.N <= GemmSkinny8::BN) CHORUS_TRY(launch_skinny<GemmSkinny8>(sta, stb, sk, s));
  else if (sk.N <= GemmSkinny32::BN) CHORUS_TRY(launch_skinny<GemmSkinny32>(sta, stb, sk, s));
  else CHORUS_TRY(launch_skinny<GemmSkinny64>(sta, stb, sk, s));
  if (g.splits == 1) return ok_status();
  const int64_t total = M * N;
  gemm_reduce_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, s>>>(rows ? sk : g);
  return check(cudaGetLastError(), "codec gemm reduce");
}

}  // namespace chorus::cuda::codec_ops
