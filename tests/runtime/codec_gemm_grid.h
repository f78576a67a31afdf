// The codec GEMM kernels' grid run on the host, for the CPU tests of its two data flows
// (codec_gemm_emulation_test.cpp, codec_gemm_wide_test.cpp): per chunk group and block, stage by
// stage, the caller stages the operands and multiplies each warp's tiles on the model arithmetic;
// this walks the blocks and warps and does what the kernels share through codec_gemm_tiles.h: the
// chunk ends, the stores, or the reduce over chunks. And the cases both run a tile on.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
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

struct Shape {
  int64_t M, N, K;
};

// A tile's data flow against the contract, for both emulators: every shape, every transpose, both
// copy widths (aligned: leading dimensions padded to multiples of 4, so gemm_vector_ok allows
// 16-byte copies, the vectors' base being new'd memory), beta and alpha varied. emulate(p, copy,
// group) runs the tile (group 0: every chunk in its block) and counts its copies in `copy` (a
// Copy with vector_copies); after(copy) adds the caller's checks. Exactly the contract's operands
// in the contract's order (bit for bit on the model), so the product to f32 accuracy (bf16: to the
// operands' rounding, about 2^-8, and not better, or they were not rounded); over several chunks
// also with one chunk and two chunks per block (the sums through the scratch and the reduce).
template <class Copy, class Emulate, class After>
void check_tile_cases(const std::string& name, GemmPrecision precision, const std::vector<Shape>& shapes,
                      uint32_t seed, Emulate&& emulate, After&& after) {
  const bool bf16 = precision == GemmPrecision::kBf16;
  int cases = 0, split_cases = 0;
  for (const Shape& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (bool aligned : {false, true}) {
        const bool ta = layout & 1, tb = layout & 2;
        const int64_t wa = ta ? s.M : s.K, wb = tb ? s.K : s.N;
        const int pad_a = static_cast<int>(aligned ? (4 - wa % 4) % 4 : (wa % 4 == 1 ? 2 : 3));
        const int pad_b = static_cast<int>(aligned ? (4 - wb % 4) % 4 : (wb % 4 == 3 ? 2 : 1));
        Problem p = make_problem(ta, tb, s.M, s.N, s.K, cases % 2 ? 0.5f : 0.0f, seed + static_cast<uint32_t>(cases),
                                 pad_a, pad_b);
        if (cases % 3 == 1) p.alpha = -0.75f;
        SCOPED_TRACE(name + (bf16 ? " bf16" : " f32") + " M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                     " K=" + std::to_string(s.K) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                     " aligned=" + std::to_string(aligned));
        Copy copy;
        const std::vector<float> C = emulate(p, copy, int64_t{0});
        if (aligned && s.K > 0 && gemm_vector_ok(p.A.data(), p.lda) && gemm_vector_ok(p.B.data(), p.ldb)) {
          EXPECT_GT(copy.vector_copies, 0);
        }
        if (!aligned) {
          EXPECT_EQ(copy.vector_copies, 0);
        }
        after(copy);
        EXPECT_EQ(differing_from_contract(p, C, precision), 0);
        EXPECT_LT(relative_error(p, C), bf16 ? 1.1 * std::ldexp(1.0, -7) : 1e-6);
        if (bf16 && s.K > 0) {
          EXPECT_GT(relative_error(p, C), 1e-5);
        }
        if (gemm_chunks(s.K) > 1)
          for (int64_t group : {1, 2}) {
            EXPECT_EQ(differing_from_contract(p, emulate(p, copy, group), precision), 0) << "group " << group;
            ++split_cases;
          }
        ++cases;
      }
  EXPECT_EQ(cases, static_cast<int>(shapes.size()) * 8);
  EXPECT_GT(split_cases, 0);
}

}  // namespace chorus::cuda::codec_ops::gemm_model
