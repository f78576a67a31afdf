// Row-wise and element-wise kernels: normalisation, rotary embedding, activations, softmax.
// Sums of squares and softmax denominators are accumulated in double: they cost little next to the
// matrix products and keep the error independent of the row length.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"

namespace chorus::cpu {

void snake_beta(const float* x, int64_t n, float alpha, float inv_beta, float* y) {
  const auto& mk = detail::active_kernels();
  constexpr int64_t kBlock = 256;
  float in[kBlock];
  for (int64_t t0 = 0; t0 < n; t0 += kBlock) {
    const int64_t m = std::min(kBlock, n - t0);
    // Arguments beyond the polynomial's range (or not finite) are rare: look for one first, in a
    // loop that vectorises, and keep a copy of x only then (y may alias x).
    int large = 0;
    for (int64_t t = 0; t < m; ++t) large |= !(std::fabs(x[t0 + t] * alpha) <= detail::kSnakeMaxArg);
    if (large) std::copy(x + t0, x + t0 + m, in);
    float* out = y + t0;
    mk.snake_row(x + t0, m, alpha, inv_beta, out);
    if (!large) continue;
    for (int64_t t = 0; t < m; ++t) {
      const float v = in[t] * alpha;
      if (!(std::fabs(v) <= detail::kSnakeMaxArg)) {
        const float s = std::sin(v);
        out[t] = in[t] + inv_beta * (s * s);
      }
    }
  }
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
  if (dim <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, float* y, int64_t rows,
                int64_t dim, float eps) {
  if (dim <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(dim);
    double var = 0.0;  // two passes: no cancellation when |mean| >> spread
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(dim);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - m) * inv * weight[i] + bias[i];
  }
}

void rope(float* x, int64_t T, int64_t heads, int64_t head_dim, const int64_t* positions,
          const float* inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float pos = static_cast<float>(positions[t]);
    float* xt = x + t * heads * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* xh = xt + h * head_dim;
        const float a = xh[i], b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = b * c + a * s;
      }
    }
  }
}

void rope_inv_freq(float theta, int64_t head_dim, float* inv_freq) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float p = static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(e)));
    inv_freq[i] = 1.0f / p;
  }
}

namespace {
inline float sigmoid1(float v) { return 1.0f / (1.0f + std::exp(-v)); }
}  // namespace

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * sigmoid1(gate[i]) * up[i];
}

void silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * sigmoid1(x[i]);
}

void gelu_erf(float* x, int64_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void elu(float* x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : alpha * std::expm1(x[i]);
}

void relu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void tanh_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
}

void sigmoid(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = sigmoid1(x[i]);
}

void softmax(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xr[i]);
    if (mx == -std::numeric_limits<float>::infinity()) {
      std::fill(xr, xr + n, 0.0f);
      continue;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      xr[i] = std::exp(xr[i] - mx);
      sum += xr[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) xr[i] *= inv;
  }
}

}  // namespace chorus::cpu
