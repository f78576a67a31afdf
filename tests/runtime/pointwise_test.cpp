// Norms, rotary embedding, activations and softmax against double-precision formulas. Tolerances
// count the f32 roundings of each formula: a few units of u = 2⁻²⁴ relative to the result, plus
// the documented amplifications (cancellation in 1 + erf, rounding of an exp argument).
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

std::vector<float> activation_inputs() {
  std::mt19937 rng(5);
  auto x = random_vec(rng, 997, -8.0f, 8.0f);
  for (float s : {0.0f, -0.0f, 1e-6f, -1e-6f, 20.0f, -20.0f, 50.0f, -50.0f, 88.0f, -100.0f})
    x.push_back(s);
  return x;
}

TEST(Pointwise, RmsNormMatchesReference) {
  std::mt19937 rng(1);
  for (int64_t dim : {1, 7, 64, 1023}) {
    const int64_t rows = 3;
    const auto x = random_vec(rng, static_cast<size_t>(rows * dim), -3.0f, 3.0f);
    const auto w = random_vec(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
    std::vector<double> ref, bound;
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int64_t i = 0; i < dim; ++i) {
        ref.push_back(x[r * dim + i] * inv * w[i]);
        bound.push_back(4 * kU * std::fabs(ref.back()) + 1e-30);
      }
    }
    std::vector<float> y(x.size(), NAN);
    rms_norm(x.data(), w.data(), y.data(), rows, dim, 1e-6f);
    expect_close(y, ref, bound, "rms_norm dim=" + std::to_string(dim));
    std::vector<float> in_place = x;  // y may alias x
    rms_norm(in_place.data(), w.data(), in_place.data(), rows, dim, 1e-6f);
    EXPECT_EQ(in_place, y);
  }
}

TEST(Pointwise, LayerNormMatchesReference) {
  std::mt19937 rng(2);
  for (int64_t dim : {2, 9, 512}) {
    const int64_t rows = 4;
    auto x = random_vec(rng, static_cast<size_t>(rows * dim), -2.0f, 2.0f);
    for (int64_t i = 0; i < dim; ++i) x[i] += 100.0f;  // a row with a large mean
    const auto w = random_vec(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
    const auto b = random_vec(rng, static_cast<size_t>(dim));
    std::vector<double> ref, bound;
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < dim; ++i) mean += x[r * dim + i];
      mean /= dim;
      for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
      const double inv = 1.0 / std::sqrt(var / dim + 1e-5);
      for (int64_t i = 0; i < dim; ++i) {
        const double xn = (x[r * dim + i] - mean) * inv * w[i];
        ref.push_back(xn + b[i]);
        // (x − mean) is formed from the f32 mean: u·(|x| + |mean|) before scaling.
        bound.push_back(4 * kU * (std::fabs(x[r * dim + i]) + std::fabs(mean)) * inv * w[i] +
                        2 * kU * std::fabs(ref.back()) + 1e-30);
      }
    }
    std::vector<float> y(x.size(), NAN);
    layer_norm(x.data(), w.data(), b.data(), y.data(), rows, dim, 1e-5f);
    expect_close(y, ref, bound, "layer_norm dim=" + std::to_string(dim));
  }
}

TEST(Pointwise, RopeMatchesReference) {
  std::mt19937 rng(3);
  for (int64_t head_dim : {2, 8, 64, 128}) {
    const int64_t T = 5, heads = 3, half = head_dim / 2;
    const std::vector<int64_t> pos = {0, 1, 17, 4095, 100000};
    std::vector<float> inv(static_cast<size_t>(half));
    rope_inv_freq(1e6f, head_dim, inv.data());
    auto x = random_vec(rng, static_cast<size_t>(T * heads * head_dim));
    std::vector<double> ref(x.size()), bound(x.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          // The angle is the f32 product (PyTorch's semantics); cos/sin of it exactly.
          const double angle = static_cast<float>(pos[t]) * inv[i];
          const size_t a = (t * heads + h) * head_dim + i, b = a + half;
          ref[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
          ref[b] = x[b] * std::cos(angle) + x[a] * std::sin(angle);
          bound[a] = bound[b] = 4 * kU * (std::fabs(x[a]) + std::fabs(x[b]));
        }
    rope(x.data(), T, heads, head_dim, pos.data(), inv.data());
    expect_close(x, ref, bound, "rope head_dim=" + std::to_string(head_dim));
  }
}

TEST(Pointwise, RopeInvFreqMatchesFormula) {
  for (float theta : {1e4f, 1e6f})
    for (int64_t d : {10, 64, 128}) {
      std::vector<float> inv(static_cast<size_t>(d / 2), NAN);
      rope_inv_freq(theta, d, inv.data());
      EXPECT_EQ(inv[0], 1.0f);
      std::vector<double> ref, bound;
      for (int64_t i = 0; i < d / 2; ++i) {
        const double e = 2.0 * i / d;
        ref.push_back(std::pow(static_cast<double>(theta), -e));
        // The f32 exponent is off by up to u·e, which scales the power by up to ln θ · e · u.
        bound.push_back((std::log(theta) * e + 2) * kU * ref.back());
      }
      expect_close(inv, ref, bound, "rope_inv_freq d=" + std::to_string(d));
    }
}

void check_activation(const char* name, void (*fn)(float*, int64_t), double (*ref_fn)(double),
                      double rel_ulps, double abs_per_x_ulps = 0.0) {
  const auto x = activation_inputs();
  auto y = x;
  fn(y.data(), static_cast<int64_t>(y.size()));
  std::vector<double> ref, bound;
  for (float v : x) {
    ref.push_back(ref_fn(v));
    bound.push_back(rel_ulps * kU * std::fabs(ref.back()) + abs_per_x_ulps * kU * std::fabs(v) +
                    1e-37);
  }
  expect_close(y, ref, bound, name);
}

TEST(Pointwise, ActivationsMatchReference) {
  check_activation("silu", silu, [](double v) { return v / (1.0 + std::exp(-v)); }, 8);
  check_activation("sigmoid", sigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, 8);
  check_activation("tanh", tanh_inplace, [](double v) { return std::tanh(v); }, 4);
  check_activation("relu", relu, [](double v) { return v > 0 ? v : 0.0; }, 0);
  check_activation("elu", [](float* p, int64_t n) { elu(p, n); },
                   [](double v) { return v > 0 ? v : std::expm1(v); }, 4);
  // 1 + erf(x/√2) cancels for x << 0: erf's absolute error u becomes ~u·|x|/2 in the result.
  check_activation("gelu_erf", gelu_erf,
                   [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }, 6, 4);
}

TEST(Pointwise, EluUsesAlpha) {
  std::vector<float> x = {-1.0f, 2.0f};
  elu(x.data(), 2, 0.5f);
  EXPECT_NEAR(x[0], 0.5 * std::expm1(-1.0), 4 * kU);
  EXPECT_EQ(x[1], 2.0f);
}

TEST(Pointwise, SiluMulMatchesReference) {
  const auto g = activation_inputs();
  std::mt19937 rng(9);
  const auto u = random_vec(rng, g.size(), -4.0f, 4.0f);
  std::vector<float> out(g.size(), NAN);
  silu_mul(g.data(), u.data(), out.data(), static_cast<int64_t>(g.size()));
  std::vector<double> ref, bound;
  for (size_t i = 0; i < g.size(); ++i) {
    ref.push_back(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i]);
    bound.push_back(10 * kU * std::fabs(ref.back()) + 1e-37);
  }
  expect_close(out, ref, bound, "silu_mul");
}

TEST(Pointwise, SoftmaxMatchesReference) {
  std::mt19937 rng(4);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 5, 1000}) {
    const int64_t rows = 3;
    auto x = random_vec(rng, static_cast<size_t>(rows * n), -10.0f, 10.0f);
    if (n > 1) x[n] = ninf;  // a masked entry in row 1 (fully masked rows: see below)
    std::vector<double> ref, bound;
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -INFINITY, sum = 0.0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[r * n + i]));
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[r * n + i] - mx);
      for (int64_t i = 0; i < n; ++i) {
        const double d = x[r * n + i] - mx;
        ref.push_back(std::exp(d) / sum);
        // x − max is rounded (relative error of exp: u·|x − max|), then exp, 1/sum and product.
        bound.push_back(ref.back() * kU * (std::isinf(d) ? 0.0 : std::fabs(d) + 6) + 1e-37);
      }
    }
    std::vector<float> y = x;
    softmax(y.data(), rows, n);
    expect_close(y, ref, bound, "softmax n=" + std::to_string(n));
  }
}

TEST(Pointwise, SoftmaxOfFullyMaskedRowIsZero) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> x = {ninf, ninf, ninf, 1.0f, 2.0f, ninf};
  softmax(x.data(), 2, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(x[i], 0.0f);
  EXPECT_NEAR(x[3] + x[4], 1.0f, 1e-6f);
  EXPECT_EQ(x[5], 0.0f);
}

}  // namespace
}  // namespace chorus::cpu::test
