// The AVX-512 kernels must give the AVX2 kernels' float results bit for bit (kernels.h): the same
// per-element reduction order, both fused. That is what keeps the CPU reference (and every golden
// comparison built on it) independent of which of the two a machine runs. Compared on shapes that
// hit every tile remainder (odd row counts, K not a multiple of 8, panels narrower than a vector).
#include <cmath>

#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

class Avx512VsAvx2 : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    if (!set_isa(Isa::kAvx2) || !set_isa(Isa::kAvx512)) GTEST_SKIP() << "this CPU lacks AVX-512 F/BW/VL/DQ";
  }
  void TearDown() override { set_isa(saved_); }

  // The kernel's output under each ISA; fails unless they are bitwise equal and not all zero.
  void expect_same(const std::function<std::vector<float>()>& run, const std::string& what) {
    ASSERT_TRUE(set_isa(Isa::kAvx2));
    const auto a = run();
    ASSERT_TRUE(set_isa(Isa::kAvx512));
    const auto b = run();
    ASSERT_EQ(a.size(), b.size()) << what;
    size_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && ++differ <= 3)
        ADD_FAILURE() << what << ": element " << i << " avx2 " << a[i] << " avx512 " << b[i];
      nonzero += a[i] != 0.0f;
    }
    EXPECT_EQ(differ, 0u) << what;
    EXPECT_GT(nonzero, a.size() / 2) << what << ": mostly zeros, the comparison is vacuous";
  }

 private:
  Isa saved_ = Isa::kPortable;
};

TEST_F(Avx512VsAvx2, LinearIsBitwiseEqualForEveryWeightTypeAndShape) {
  const int64_t shapes[][3] = {{1, 1, 1},  {1, 7, 13},  {1, 33, 100}, {3, 5, 8},    {5, 17, 31},
                               {2, 9, 16}, {4, 4, 7},   {7, 64, 257}, {13, 11, 129}, {1, 203, 1000},
                               {6, 130, 515}, {1, 2048, 1024}};
  std::mt19937 rng(11);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const auto& s : shapes) {
      const int64_t M = s[0], N = s[1], K = s[2];
      const auto x = random_vec(rng, static_cast<size_t>(M * K));
      const TestMatrix w = random_matrix(dt, N, K, rng);
      const auto bias = random_vec(rng, static_cast<size_t>(N));
      expect_same(
          [&] {
            std::vector<float> y(static_cast<size_t>(M * N), NAN);
            linear(x.data(), M, w.ref(), bias.data(), y.data());
            return y;
          },
          std::string("linear ") + dtype_name(dt) + " " + std::to_string(M) + "x" + std::to_string(N) + "x" +
              std::to_string(K));
    }
}

TEST_F(Avx512VsAvx2, AttentionIsBitwiseEqual) {
  const int64_t cases[][6] = {// Tq, Tk, Hq, Hkv, D, q_pos0
                              {1, 83, 16, 8, 128, 82}, {5, 40, 4, 1, 7, 35}, {3, 3, 6, 3, 20, 0}};
  std::mt19937 rng(12);
  for (const auto& c : cases) {
    const int64_t Tq = c[0], Tk = c[1], Hq = c[2], Hkv = c[3], D = c[4], pos0 = c[5];
    const auto q = random_vec(rng, static_cast<size_t>(Tq * Hq * D));
    const auto k = random_vec(rng, static_cast<size_t>(Tk * Hkv * D));
    const auto v = random_vec(rng, static_cast<size_t>(Tk * Hkv * D));
    expect_same(
        [&] {
          std::vector<float> out(static_cast<size_t>(Tq * Hq * D), NAN);
          attention(q.data(), Tq, Hq, k.data(), v.data(), Tk, Hkv, D, pos0, 0, 0.3f, out.data());
          return out;
        },
        "attention D=" + std::to_string(D));
  }
}

TEST_F(Avx512VsAvx2, ConvolutionsAreBitwiseEqualIncludingNarrowPanels) {
  std::mt19937 rng(13);
  // conv1d: Cin, T, Cout, K, stride, dilation; T − span + 1 output columns (3, 21, 200); the last
  // walks its 168-row depth in two panels (128 + 40) whose sums carry over.
  const int64_t convs[][6] = {{8, 9, 12, 7, 1, 1}, {16, 27, 8, 7, 1, 1}, {6, 412, 10, 3, 2, 1}, {5, 40, 7, 3, 1, 9},
                              {24, 170, 37, 7, 1, 3}};
  for (const auto& c : convs) {
    const int64_t Cin = c[0], T = c[1], Cout = c[2], K = c[3], stride = c[4], dil = c[5];
    const auto x = random_vec(rng, static_cast<size_t>(Cin * T));
    const TestMatrix w = random_matrix(DType::kBF16, Cout, Cin * K, rng);
    const auto bias = random_vec(rng, static_cast<size_t>(Cout));
    const int64_t Tout = (T - dil * (K - 1) - 1) / stride + 1;
    expect_same(
        [&] {
          std::vector<float> y(static_cast<size_t>(Cout * Tout), NAN);
          conv1d(x.data(), Cin, T, w.ref(), K, bias.data(), stride, dil, 1, y.data());
          return y;
        },
        "conv1d Tout=" + std::to_string(Tout));
  }
  // conv_transpose1d: Cin, T, Cout, K, stride (Cout·K columns per panel: 12, 70, 256).
  const int64_t tconvs[][5] = {{6, 5, 3, 4, 2}, {9, 13, 7, 10, 5}, {16, 4, 16, 16, 8}};
  for (const auto& c : tconvs) {
    const int64_t Cin = c[0], T = c[1], Cout = c[2], K = c[3], stride = c[4];
    const auto x = random_vec(rng, static_cast<size_t>(Cin * T));
    const TestMatrix w = random_matrix(DType::kF32, Cin, Cout * K, rng);
    const int64_t Tout = (T - 1) * stride + K;
    expect_same(
        [&] {
          std::vector<float> y(static_cast<size_t>(Cout * Tout), NAN);
          conv_transpose1d(x.data(), Cin, T, w.ref(), Cout, K, nullptr, stride, 1, y.data());
          return y;
        },
        "conv_transpose1d Cout·K=" + std::to_string(Cout * K));
  }
}

// snake_beta promises the same values on every ISA: the AVX-512 version repeats the portable
// operations without fusing them.
TEST_F(Avx512VsAvx2, SnakeIsBitwiseEqualToThePortableVersion) {
  std::mt19937 rng(14);
  auto x = random_vec(rng, 1000, -40.0f, 40.0f);
  x[5] = 1e5f;  // beyond the polynomial's range: the library sin, on every ISA
  x[6] = -0.0f;
  for (int64_t n : {int64_t{1000}, int64_t{37}, int64_t{16}, int64_t{5}}) {
    const auto run = [&] {
      std::vector<float> y(static_cast<size_t>(n), NAN);
      snake_beta(x.data(), n, 1.7f, 0.6f, y.data());
      return y;
    };
    ASSERT_TRUE(set_isa(Isa::kPortable));
    const auto a = run();
    ASSERT_TRUE(set_isa(Isa::kAvx512));
    const auto b = run();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "n=" << n;
    EXPECT_FALSE(std::isnan(b[0]));
  }
}

}  // namespace
}  // namespace chorus::cpu::test
