// The tensor-core linear kernel (runtime/cuda/linear_tensor.cu): a row's outputs are bit for bit the
// same whatever rows share the launch, how many, where the row sits in its tile, and whether the
// launch spreads K's chunks over blocks (launches of up to 64 rows) or not, or stages tiles of many
// rows through shared memory (more than 64). That is what a stream's codes rest on when it joins a
// batch of any size (LoadOptions::batch_invariant).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test_util.h"

namespace chorus::gpu_test {
namespace {

struct Shapes {
  int64_t K;
  int64_t N[3];
};

// One launch over rows [start, start + M) of x for each epilogue: the concatenated outputs, row by
// row (qkv-like store with norm and bias, residual add, SwiGLU with norm).
std::vector<float> run_rows(cuda::LinearWorkspace& ws, int path, const std::vector<float>& x,
                            const std::vector<float>& g, const Bf16Matrix (&w)[4], const cuda::DeviceBuffer (&bias)[3],
                            const std::vector<float>& residual, const Shapes& s, int64_t start, int64_t M, bool bf16,
                            int64_t pad = 0) {
  const int64_t K = s.K, ldx = K + pad;
  // pad: rows ldx = K + pad apart.
  std::vector<float> xs(static_cast<size_t>(M * ldx), NAN);
  for (int64_t m = 0; m < M; ++m) std::copy_n(x.begin() + (start + m) * K, K, xs.begin() + m * ldx);
  const auto dx = to_device(xs), dg = to_device(g);
  const int64_t n_store = s.N[0] + s.N[1] + s.N[2];
  auto d_store = poisoned(static_cast<size_t>(M * n_store));
  const std::vector<float> res(residual.begin() + start * s.N[0], residual.begin() + (start + M) * s.N[0]);
  auto d_add = to_device(res);
  auto d_glu = poisoned(static_cast<size_t>(M * s.N[1]));
  const auto over_rows = [&] {  // what the three launches share
    cuda::LinearArgs a;
    a.x = dx.as<float>();
    a.ldx = ldx;
    a.M = M;
    a.bf16 = bf16;
    return a;
  };
  {
    cuda::LinearArgs a = over_rows();
    a.norm_weight = dg.as<float>();
    a.outputs = 3;
    int64_t off = 0;
    for (int i = 0; i < 3; ++i) {
      a.out[i] = {w[i].gpu(), bias[i].as<float>(), d_store.as<float>() + off, n_store};
      off += s.N[i];
    }
    EXPECT_TRUE(cuda::linear(a, &ws, nullptr, path).ok());
  }
  {
    cuda::LinearArgs a = over_rows();
    a.out[0] = {w[0].gpu(), nullptr, d_add.as<float>(), s.N[0]};
    a.epilogue = cuda::Epilogue::kAdd;
    EXPECT_TRUE(cuda::linear(a, &ws, nullptr, path).ok());
  }
  {
    cuda::LinearArgs a = over_rows();
    a.norm_weight = dg.as<float>();
    a.outputs = 2;
    a.out[0] = {w[1].gpu(), bias[1].as<float>(), d_glu.as<float>(), s.N[1]};
    a.out[1] = {w[3].gpu(), nullptr, d_glu.as<float>(), s.N[1]};
    a.epilogue = cuda::Epilogue::kSwiGlu;
    EXPECT_TRUE(cuda::linear(a, &ws, nullptr, path).ok());
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto st = to_host<float>(d_store, static_cast<size_t>(M * n_store));
  const auto ad = to_host<float>(d_add, static_cast<size_t>(M * s.N[0]));
  const auto gl = to_host<float>(d_glu, static_cast<size_t>(M * s.N[1]));
  std::vector<float> out;
  for (int64_t m = 0; m < M; ++m) {
    out.insert(out.end(), st.begin() + m * n_store, st.begin() + (m + 1) * n_store);
    out.insert(out.end(), ad.begin() + m * s.N[0], ad.begin() + (m + 1) * s.N[0]);
    out.insert(out.end(), gl.begin() + m * s.N[1], gl.begin() + (m + 1) * s.N[1]);
  }
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(GpuLinearTensor, ARowsOutputsDoNotDependOnItsBatch) {
  REQUIRE_GPU();
  std::mt19937 rng(31);
  constexpr int64_t kRows = 300;
  // Every row count through the tensor kernel (kLinearAuto with every_row_tensor), as a batch-
  // invariant frame pool runs it.
  auto ws = cuda::LinearWorkspace::create(kRows, 3072, 512, 0, /*every_row_tensor=*/true);
  ASSERT_TRUE(ws.ok()) << ws.error().to_string();
  int64_t compared = 0, gemv_differs = 0;
  // K = 1000: the last 32-k step and the last chunk are partial; 2048 and 3072: 8 and 12 chunks.
  for (const Shapes& s : {Shapes{64, {96, 32, 40}}, Shapes{1000, {64, 48, 16}}, Shapes{2048, {96, 32, 40}},
                         Shapes{3072, {32, 24, 8}}})
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << "K " << s.K << (bf16 ? " bf16" : " f32"));
      const int64_t K = s.K;
      const auto x = random_vec(rng, static_cast<size_t>(kRows * K));
      const auto g = random_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
      const auto residual = random_vec(rng, static_cast<size_t>(kRows * s.N[0]));
      Bf16Matrix w[4];
      cuda::DeviceBuffer bias[3];
      for (int i = 0; i < 3; ++i) {
        w[i] = random_bf16(rng, s.N[i], K, 1.0f / std::sqrt(static_cast<float>(K)));
        bias[i] = to_device(random_vec(rng, static_cast<size_t>(s.N[i])));
      }
      w[3] = random_bf16(rng, s.N[1], K, 1.0f / std::sqrt(static_cast<float>(K)));
      const auto full = run_rows(*ws, cuda::kLinearAuto, x, g, w, bias, residual, s, 0, kRows, bf16);
      const size_t per_row = full.size() / kRows;
      int64_t nonzero = 0;
      for (float v : full) {
        ASSERT_FALSE(std::isnan(v)) << "an output was not written";
        nonzero += v != 0.0f;
      }
      EXPECT_GT(nonzero, static_cast<int64_t>(full.size() / 2));
      // Row counts from 1 up (tiles of 8, 16 and 32 rows), starting at rows that put each row
      // elsewhere in its tile; up to 64 rows the launches spread the chunks (K > 256), past that
      // they do not.
      // Past 64 rows the tiled kernel; pad 1: input rows that are not 16-byte aligned.
      struct Part {
        int64_t M, start, pad;
      };
      for (const Part& pt : {Part{1, 7, 0}, Part{3, 100, 0}, Part{8, 291, 0}, Part{13, 50, 0}, Part{40, 0, 0},
                             Part{64, 200, 0}, Part{100, 123, 0}, Part{257, 1, 0}, Part{100, 150, 1}, Part{65, 3, 1}}) {
        const int64_t M = pt.M, start = pt.start;
        const auto part = run_rows(*ws, cuda::kLinearAuto, x, g, w, bias, residual, s, start, M, bf16, pt.pad);
        ASSERT_EQ(part.size(), per_row * M);
        for (size_t i = 0; i < part.size(); ++i) {
          const size_t at = start * per_row + i;
          ASSERT_TRUE(same_bits(part[i], full[at]))
              << M << " rows from row " << start << ": row " << start + i / per_row << ", output " << i % per_row
              << ": " << part[i] << " against " << full[at] << " in the launch of all rows";
          ++compared;
        }
      }
      // The comparison can see a rounding difference: the matrix-vector kernels' outputs for the
      // same rows differ from these somewhere (f32: different summation; bf16: mostly rounded away).
      if (!bf16) {
        const auto gemv = run_rows(*ws, cuda::kLinearGemv, x, g, w, bias, residual, s, 0, 8, bf16);
        for (size_t i = 0; i < gemv.size(); ++i) gemv_differs += !same_bits(gemv[i], full[i]);
      }
    }
  EXPECT_GT(compared, 100000);
  EXPECT_GT(gemv_differs, 0) << "the bitwise comparison never saw the two kernels' rounding apart";
  std::printf("[tensor linear] %lld outputs compared bit for bit; %lld of the matrix-vector kernel's differ\n",
              static_cast<long long>(compared), static_cast<long long>(gemv_differs));
}

// Against the CPU (cpu::linear after cpu::rms_norm): the split inputs keep f32-level accuracy.
TEST(GpuLinearTensor, MatchesTheCpuToSplitInputAccuracy) {
  REQUIRE_GPU();
  std::mt19937 rng(32);
  auto ws = cuda::LinearWorkspace::create(96, 4096, 256, 0, true);
  ASSERT_TRUE(ws.ok()) << ws.error().to_string();
  for (int64_t K : {64, 1000, 4096})
    for (int64_t M : {1, 9, 96}) {
      SCOPED_TRACE(testing::Message() << "K " << K << " M " << M);
      const int64_t N = 200;
      const auto x = random_vec(rng, static_cast<size_t>(M * K));
      const auto dx = to_device(x);
      const Bf16Matrix w = random_bf16(rng, N, K, 1.0f / std::sqrt(static_cast<float>(K)));
      auto dy = poisoned(static_cast<size_t>(M * N));
      cuda::LinearArgs a;
      a.x = dx.as<float>();
      a.ldx = K;
      a.M = M;
      a.out[0] = {w.gpu(), nullptr, dy.as<float>(), N};
      ASSERT_TRUE(cuda::linear(a, &*ws, nullptr).ok());
      std::vector<float> want(static_cast<size_t>(M * N));
      cpu::linear(x.data(), M, w.cpu(), nullptr, want.data());
      EXPECT_LT(rel_err(to_host<float>(dy, want.size()), want), 2e-4);
    }
}

// What run_rows computes, on the CPU (cpu::rms_norm, cpu::linear, cpu::silu_mul), in its layout.
std::vector<float> cpu_rows(const std::vector<float>& x, const std::vector<float>& g, const Bf16Matrix (&w)[4],
                            const std::vector<float> (&bias)[3], const std::vector<float>& residual, const Shapes& s,
                            int64_t M) {
  const int64_t K = s.K;
  std::vector<float> xn(static_cast<size_t>(M * K));
  cpu::rms_norm(x.data(), g.data(), xn.data(), M, K, 1e-6f);
  const auto product = [&](const std::vector<float>& in, const Bf16Matrix& m, const float* b) {
    std::vector<float> y(static_cast<size_t>(M * m.rows));
    cpu::linear(in.data(), M, m.cpu(), b, y.data());
    return y;
  };
  std::vector<float> st[3];
  for (int i = 0; i < 3; ++i) st[i] = product(xn, w[i], bias[i].data());
  auto ad = product(x, w[0], nullptr);
  for (size_t i = 0; i < ad.size(); ++i) ad[i] += residual[i];
  const auto gate = product(xn, w[1], bias[1].data()), up = product(xn, w[3], nullptr);
  std::vector<float> gl(gate.size());
  cpu::silu_mul(gate.data(), up.data(), gl.data(), static_cast<int64_t>(gl.size()));
  std::vector<float> out;
  for (int64_t m = 0; m < M; ++m) {
    for (int i = 0; i < 3; ++i) out.insert(out.end(), st[i].begin() + m * s.N[i], st[i].begin() + (m + 1) * s.N[i]);
    out.insert(out.end(), ad.begin() + m * s.N[0], ad.begin() + (m + 1) * s.N[0]);
    out.insert(out.end(), gl.begin() + m * s.N[1], gl.begin() + (m + 1) * s.N[1]);
  }
  return out;
}

// In the default mode 3 to 8 rows of bf16 matrices take the tensor kernel with the inputs split into
// three bf16 parts (linear.cu): against the CPU they must be as accurate as the matrix-vector
// kernels they stand in for (whose f32 inputs the GPU-vs-CPU sampling tests rest on), and more
// accurate than the two-part inputs of the every-row mode. Guards: their bits differ from both
// (so the launch took neither of those paths).
TEST(GpuLinearTensor, FewRowsWithThreePartInputsAreAsAccurateAsTheMatrixVectorKernels) {
  REQUIRE_GPU();
  std::mt19937 rng(33);
  auto ws = cuda::LinearWorkspace::create(cuda::kGemvMaxRows, 3072, 512);
  auto ws_two = cuda::LinearWorkspace::create(cuda::kGemvMaxRows, 3072, 512, 0, /*every_row_tensor=*/true);
  ASSERT_TRUE(ws.ok() && ws_two.ok());
  double err_three = 0, err_two = 0;
  int64_t outputs = 0, differ_gemv = 0, differ_two = 0;
  for (const Shapes& s : {Shapes{64, {96, 32, 40}}, Shapes{1000, {64, 48, 16}}, Shapes{2048, {96, 32, 40}},
                         Shapes{3072, {32, 24, 8}}})
    for (int64_t M = cuda::kTensorMinRows; M <= cuda::kGemvMaxRows; ++M) {
      SCOPED_TRACE(testing::Message() << "K " << s.K << " M " << M);
      const int64_t K = s.K;
      const auto x = random_vec(rng, static_cast<size_t>(M * K));
      const auto g = random_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
      const auto residual = random_vec(rng, static_cast<size_t>(M * s.N[0]));
      Bf16Matrix w[4];
      std::vector<float> bias[3];
      cuda::DeviceBuffer dbias[3];
      for (int i = 0; i < 3; ++i) {
        w[i] = random_bf16(rng, s.N[i], K, 1.0f / std::sqrt(static_cast<float>(K)));
        bias[i] = random_vec(rng, static_cast<size_t>(s.N[i]));
        dbias[i] = to_device(bias[i]);
      }
      w[3] = random_bf16(rng, s.N[1], K, 1.0f / std::sqrt(static_cast<float>(K)));
      const auto want = cpu_rows(x, g, w, bias, residual, s, M);
      const auto three = run_rows(*ws, cuda::kLinearAuto, x, g, w, dbias, residual, s, 0, M, false);
      const auto gemv = run_rows(*ws, cuda::kLinearGemv, x, g, w, dbias, residual, s, 0, M, false);
      const auto two = run_rows(*ws_two, cuda::kLinearAuto, x, g, w, dbias, residual, s, 0, M, false);
      ASSERT_EQ(three.size(), want.size());
      const double e3 = rel_err(three, want), eg = rel_err(gemv, want), e2 = rel_err(two, want);
      EXPECT_LE(e3, std::max(4 * eg, 1e-6)) << "matrix-vector kernels: " << eg;
      err_three += e3;
      err_two += e2;
      for (size_t i = 0; i < want.size(); ++i) {
        differ_gemv += !same_bits(three[i], gemv[i]);
        differ_two += !same_bits(three[i], two[i]);
      }
      outputs += static_cast<int64_t>(want.size());
    }
  EXPECT_LT(err_three, err_two) << "the third input part gained no accuracy";
  EXPECT_GT(differ_gemv, 0) << "the launches never left the matrix-vector kernels";
  EXPECT_GT(differ_two, 0) << "the launches never used the third input part";
  std::printf("[tensor linear, 3-8 rows] %lld outputs; %lld differ from the matrix-vector kernels', %lld from the "
              "two-part inputs'; summed relative error %.3g (two parts: %.3g)\n",
              static_cast<long long>(outputs), static_cast<long long>(differ_gemv), static_cast<long long>(differ_two),
              err_three, err_two);
}

}  // namespace
}  // namespace chorus::gpu_test
