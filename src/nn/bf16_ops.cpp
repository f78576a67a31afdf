#include "nn/bf16_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"

namespace chorus::nn::bf16 {

void round(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = round_to_bf16(weight[i] * round_to_bf16(xr[i] * inv));
  }
}

void rope(float* x, int64_t T, int64_t heads, int64_t hd, const int64_t* positions, const float* inv_freq) {
  const int64_t half = hd / 2;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      const float c = round_to_bf16(std::cos(angle)), s = round_to_bf16(std::sin(angle));
      for (int64_t h = 0; h < heads; ++h) {
        float* xh = x + (t * heads + h) * hd;
        const float a = xh[i], b = xh[i + half];
        xh[i] = round_to_bf16(round_to_bf16(a * c) - round_to_bf16(b * s));
        xh[i + half] = round_to_bf16(round_to_bf16(b * c) + round_to_bf16(a * s));
      }
    }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float act = round_to_bf16(g / (1.0f + std::exp(-g)));
    out[i] = round_to_bf16(act * up[i]);
  }
}

void attention(const float* q, int64_t Tq, int64_t Hq, const float* k, const float* v, int64_t Hkv, int64_t D,
               int64_t q_pos0, float scale, float* out, ThreadPool* pool) {
  const int64_t group = Hq / Hkv, kvw = Hkv * D;
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(q_pos0 + Tq));
    std::vector<float> acc(static_cast<size_t>(D));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / Hq, h = task % Hq, kvh = h / group, keys = q_pos0 + t + 1;
      const float* qi = q + (t * Hq + h) * D;
      float mx = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        const float* kj = k + j * kvw + kvh * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
        const float s = round_to_bf16(round_to_bf16(dot) * scale);
        p[static_cast<size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < keys; ++j) sum += (p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - mx));
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < keys; ++j) {
        const float w = round_to_bf16(p[static_cast<size_t>(j)] / sum);
        const float* vj = v + j * kvw + kvh * D;
        for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += w * vj[d];
      }
      float* oi = out + (t * Hq + h) * D;
      for (int64_t d = 0; d < D; ++d) oi[d] = round_to_bf16(acc[static_cast<size_t>(d)]);
    }
  };
  if (pool) pool->parallel_for(Tq * Hq, work, 1);
  else work(0, Tq * Hq);
}

}  // namespace chorus::nn::bf16
