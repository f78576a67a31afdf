// The codec GEMM kernels' grid run on the host, for the CPU tests of its two data flows
// (codec_gemm_emulation_test.cpp, codec_gemm_wide_test.cpp): per chunk group and block, stage by
// stage, the caller stages the operands and multiplies each warp's tiles on the model arithmetic;
// this walks the blocks and warps and does what the kernels share through codec_gemm_tiles.h: the
// chunk ends, the stores, or the reduce over chunks.
#pragma once

#include <cstring>
#include <vector>

#include "codec_gemm_model.h"
#include "runtime/cuda/codec_gemm_tiles.h"

namespace chorus::cuda::codec_ops::gemm_model {

// A warp's accumulators, lane by lane, as the kernels hold them.
template <class T>
struct WarpAcc {
  float v[T::MT][T::NT][32][4];
};

// The kernels' arguments for p (C written into `C`, a copy of p.C0); `group` chunks per block
// (0: all), their sums through `partial` when fewer.
inline GemmArgs grid_args(const Problem& p, std::vector<float>& C, std::vector<float>& partial, GemmPrecision precision,
                          int64_t group) {
  C = p.C0;
  GemmArgs g;
  g.M = p.M;
  g.N = p.N;
  g.K = p.K;
  g.alpha = p.alpha;
  g.beta = p.beta;
  g.A = p.A.data();
  g.lda = p.lda;
  g.B = p.B.data();
  g.ldb = p.ldb;
  g.C = C.data();
  g.ldc = p.ldc;
  g.chunks = gemm_chunks(p.K);
  g.precision = precision;
  g.group = group <= 0 || group > g.chunks ? g.chunks : group;
  partial.assign(static_cast<size_t>(g.chunks * p.M * p.N), NAN);
  if (!gemm_whole_k(g)) g.partial = partial.data();
  return g;
}

// stage(g, m0, n0, k0, k_begin, k_end): stage the block's operands at k0 (of the group [k_begin,
// k_end)); multiply(row0, col0, steps, acc): the k-steps of the stage of the warp at (row0, col0)
// of the block (inside C) into its accumulators.
template <class T, class Stage, class Multiply>
std::vector<float> run_grid(const Problem& p, GemmPrecision precision, int64_t group, Stage&& stage,
                            Multiply&& multiply) {
  std::vector<float> C, partial;
  const GemmArgs g = grid_args(p, C, partial, precision, group);
  constexpr int kWarps = T::kThreads / 32;
  std::vector<WarpAcc<T>> acc(kWarps), sum(kWarps);
  auto inside = [&](int w, int64_t m0, int64_t n0, int& row0, int& col0) {
    gemm_warp_origin<T>(w, row0, col0);
    return m0 + row0 < p.M && n0 + col0 < p.N;
  };
  for (int64_t z = 0; z < gemm_groups(g); ++z)
    for (int64_t m0 = 0; m0 < p.M; m0 += T::BM)
      for (int64_t n0 = 0; n0 < p.N; n0 += T::BN) {
        for (WarpAcc<T>& a : acc) std::memset(&a, 0, sizeof a);
        for (WarpAcc<T>& a : sum) std::memset(&a, 0, sizeof a);
        int64_t kb = 0, ke = 0;
        gemm_group_k(g, z, kb, ke);
        for (int64_t k0 = kb; k0 < ke; k0 += T::BK) {
          stage(g, m0, n0, k0, kb, ke);
          const int steps = precision == GemmPrecision::kBf16 ? gemm_stage_steps<T, GemmPrecision::kBf16>(k0, ke)
                                                               : gemm_stage_steps<T>(k0, ke);
          const bool ends = gemm_stage_ends_chunk<T>(k0, ke);
          for (int w = 0; w < kWarps; ++w) {
            int row0, col0;
            if (!inside(w, m0, n0, row0, col0)) continue;
            WarpAcc<T>& a = acc[static_cast<size_t>(w)];
            multiply(row0, col0, steps, a);
            if (ends)
              for (int i = 0; i < T::MT; ++i)
                for (int j = 0; j < T::NT; ++j)
                  for (int lane = 0; lane < 32; ++lane)
                    gemm_end_chunk(g, a.v[i][j][lane], sum[static_cast<size_t>(w)].v[i][j][lane], m0 + row0 + i * 16,
                                   n0 + col0 + j * 8, lane, k0 / kGemmKChunk);
          }
        }
        if (!gemm_whole_k(g)) continue;
        for (int w = 0; w < kWarps; ++w) {
          int row0, col0;
          if (!inside(w, m0, n0, row0, col0)) continue;
          for (int i = 0; i < T::MT; ++i)
            for (int j = 0; j < T::NT; ++j)
              for (int lane = 0; lane < 32; ++lane)
                gemm_store_frag(g, sum[static_cast<size_t>(w)].v[i][j][lane], m0 + row0 + i * 16, n0 + col0 + j * 8,
                                lane);
        }
      }
  if (!gemm_whole_k(g))
    for (int64_t i = 0; i < p.M * p.N; ++i) gemm_reduce_element(g, i);
  return C;
}

}  // namespace chorus::cuda::codec_ops::gemm_model
