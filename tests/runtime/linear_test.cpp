// linear and embedding against naive double-precision references.
//
// Tolerance for a sum of n products computed in f32 (any order, 8 lanes or sequential, fused or
// not): |err| <= (2·√n + 2)·u·Σ|xᵢwᵢ| with u = 2⁻²⁴. The rigorous worst case is n·u·Σ|xᵢwᵢ|;
// rounding errors of a sum behave like a random walk, so √n with a factor 2 of slack is safe for
// these seeded inputs while still ~K times smaller than dropping or repeating one term.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

struct LinearCase {
  int64_t M, N, K;
};

std::vector<float> run_linear(const std::vector<float>& x, int64_t M, const TestMatrix& w,
                              const float* bias, ThreadPool* pool) {
  std::vector<float> y(static_cast<size_t>(M * w.rows), NAN);
  linear(x.data(), M, w.ref(), bias, y.data(), pool);
  return y;
}

double check_linear(DType dt, LinearCase c, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto x = random_vec(rng, static_cast<size_t>(c.M * c.K));
  const TestMatrix w = random_matrix(dt, c.N, c.K, rng);
  const auto b = random_vec(rng, static_cast<size_t>(c.N));
  const float* bias = with_bias ? b.data() : nullptr;

  std::vector<double> ref(static_cast<size_t>(c.M * c.N)), bound(ref.size());
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double s = bias ? bias[n] : 0.0, mag = bias ? std::fabs(bias[n]) : 0.0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(x[m * c.K + k]) * w.at(n, k);
        s += p;
        mag += std::fabs(p);
      }
      ref[m * c.N + n] = s;
      bound[m * c.N + n] = (2.0 * std::sqrt(static_cast<double>(c.K)) + 2.0) * kU * mag;
    }
  const std::string what = std::string("linear ") + dtype_name(dt) + " M=" + std::to_string(c.M) +
                           " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                           (with_bias ? " +bias" : "");
  const auto y = run_thread_counts(
      [&](ThreadPool* pool) { return run_linear(x, c.M, w, bias, pool); }, what);
  return expect_close(y, ref, bound, what);
}

using LinearTest = IsaTest;

TEST_P(LinearTest, MatchesDoubleReferenceForAllWeightTypes) {
  const LinearCase cases[] = {{1, 1, 1},   {1, 7, 13},   {1, 33, 100},  {3, 5, 8},
                              {5, 17, 31}, {2, 9, 16},   {4, 4, 7},     {7, 64, 257},
                              {13, 11, 129}, {1, 203, 1000}, {6, 130, 515}};
  uint32_t seed = 1;
  double worst = 0.0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const auto& c : cases)
      for (bool with_bias : {false, true})
        worst = std::max(worst, check_linear(dt, c, with_bias, seed++));
  std::printf("linear: worst |err| / bound = %.3g\n", worst);
}

TEST_P(LinearTest, LargeShapesAreThreadCountInvariant) {
  // Big enough that a 3-thread pool really splits the rows (>= 3 × 64K multiply-adds).
  check_linear(DType::kBF16, {1, 1000, 512}, true, 101);
  check_linear(DType::kF32, {5, 203, 301}, false, 102);
  check_linear(DType::kF16, {17, 150, 200}, true, 103);
}

TEST_P(LinearTest, RowResultDoesNotDependOnBatchSize) {
  // Decode (M = 1) and prefill (M > 1) must give bitwise identical rows: the tile shape must not
  // change any element's reduction order.
  std::mt19937 rng(7);
  const int64_t M = 7, K = 203;
  const TestMatrix w = random_matrix(DType::kBF16, 37, K, rng);
  const auto x = random_vec(rng, static_cast<size_t>(M * K));
  const auto all = run_linear(x, M, w, nullptr, nullptr);
  for (int64_t m = 0; m < M; ++m) {
    const std::vector<float> row(x.begin() + m * K, x.begin() + (m + 1) * K);
    const auto one = run_linear(row, 1, w, nullptr, nullptr);
    EXPECT_EQ(std::memcmp(one.data(), all.data() + m * w.rows, one.size() * sizeof(float)), 0)
        << "row " << m;
  }
}

TEST_P(LinearTest, ZeroLengthRowsGiveTheBias) {
  TestMatrix w;
  w.rows = 3;
  w.cols = 0;
  const std::vector<float> bias = {1.5f, -2.0f, 0.25f};
  std::vector<float> y(6, NAN);
  linear(nullptr, 2, w.ref(), bias.data(), y.data());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], bias[i % 3]);
}

CHORUS_INSTANTIATE_ISA(LinearTest);

TEST(Embedding, GathersRowsExactly) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const TestMatrix table = random_matrix(dt, 10, 19, rng);
    const std::vector<int32_t> ids = {3, 0, 9, 3, 7};
    std::vector<float> out(ids.size() * 19, NAN);
    embedding(table.ref(), ids.data(), static_cast<int64_t>(ids.size()), out.data());
    std::vector<double> ref;
    for (int32_t id : ids)
      for (int64_t c = 0; c < 19; ++c) ref.push_back(table.at(id, c));
    expect_close(out, ref, 0.0, std::string("embedding ") + dtype_name(dt));
  }
}

TEST(Embedding, OutOfRangeIdsGiveZerosInsteadOfReadingOutOfBounds) {
  std::mt19937 rng(4);
  const TestMatrix table = random_matrix(DType::kBF16, 4, 8, rng);
  const std::vector<int32_t> ids = {-1, 4};
  std::vector<float> out(16, NAN);
  embedding(table.ref(), ids.data(), 2, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace chorus::cpu::test
