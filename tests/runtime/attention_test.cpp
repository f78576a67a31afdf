// attention against a naive double-precision reference: causal masking at q_pos0 > 0 (decode and
// chunked prefill over a cache), sliding windows, GQA/MQA head mapping, odd head sizes.
//
// Tolerance per output element: a score sⱼ = scale·q·kⱼ carries at most
// δs = (2√D + 2)·u·scale·Σ|q·k| (the sum-of-products bound of linear_test.cpp). Shifting every
// score by at most δs moves the softmax-weighted mean by at most 2δs·Σpⱼ|vⱼ|; exp, the
// normalisation and the weighted sum over n keys add (2√n + 8)·u·Σpⱼ|vⱼ|.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

struct AttnCase {
  int64_t Tq, Tk, Hq, Hkv, D, q_pos0, window;
};

std::string describe(const AttnCase& c) {
  return "attention Tq=" + std::to_string(c.Tq) + " Tk=" + std::to_string(c.Tk) +
         " Hq=" + std::to_string(c.Hq) + " Hkv=" + std::to_string(c.Hkv) +
         " D=" + std::to_string(c.D) + " q_pos0=" + std::to_string(c.q_pos0) +
         " window=" + std::to_string(c.window);
}

void reference_attention(const AttnCase& c, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, float scale, std::vector<double>& out,
                         std::vector<double>& bound) {
  out.assign(static_cast<size_t>(c.Tq * c.Hq * c.D), 0.0);
  bound.assign(out.size(), 0.0);
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t i = 0; i < c.Tq; ++i)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t kvh = h / group, pos = c.q_pos0 + i;
      std::vector<int64_t> keys;
      for (int64_t j = 0; j < c.Tk; ++j)
        if (j <= pos && (c.window <= 0 || j > pos - c.window)) keys.push_back(j);
      const float* qv = q.data() + (i * c.Hq + h) * c.D;
      std::vector<double> s;
      double ds = 0.0, mx = -INFINITY;
      for (int64_t j : keys) {
        const float* kv = k.data() + (j * c.Hkv + kvh) * c.D;
        double dot = 0.0, mag = 0.0;
        for (int64_t d = 0; d < c.D; ++d) {
          dot += static_cast<double>(qv[d]) * kv[d];
          mag += std::fabs(static_cast<double>(qv[d]) * kv[d]);
        }
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
        ds = std::max(ds, (2.0 * std::sqrt(static_cast<double>(c.D)) + 2.0) * kU * scale * mag);
      }
      double sum = 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      const double n = static_cast<double>(keys.size());
      for (int64_t d = 0; d < c.D; ++d) {
        double o = 0.0, mag = 0.0;
        for (size_t idx = 0; idx < keys.size(); ++idx) {
          const double vj = v[(keys[idx] * c.Hkv + kvh) * c.D + d], p = s[idx] / sum;
          o += p * vj;
          mag += p * std::fabs(vj);
        }
        out[(i * c.Hq + h) * c.D + d] = o;
        bound[(i * c.Hq + h) * c.D + d] = mag * (2.0 * ds + (2.0 * std::sqrt(n) + 8.0) * kU);
      }
    }
}

double check_attention(const AttnCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto q = random_vec(rng, static_cast<size_t>(c.Tq * c.Hq * c.D));
  const auto k = random_vec(rng, static_cast<size_t>(c.Tk * c.Hkv * c.D));
  const auto v = random_vec(rng, static_cast<size_t>(c.Tk * c.Hkv * c.D));
  // A larger-than-usual scale makes the softmax peaked, so masking mistakes show clearly.
  const float scale = 2.0f / std::sqrt(static_cast<float>(c.D));
  std::vector<double> ref, bound;
  reference_attention(c, q, k, v, scale, ref, bound);
  const auto out = run_thread_counts(
      [&](ThreadPool* pool) {
        std::vector<float> o(ref.size(), NAN);
        attention(q.data(), c.Tq, c.Hq, k.data(), v.data(), c.Tk, c.Hkv, c.D, c.q_pos0, c.window,
                  scale, o.data(), pool);
        return o;
      },
      describe(c));
  return expect_close(out, ref, bound, describe(c));
}

using AttentionTest = IsaTest;

TEST_P(AttentionTest, MatchesDoubleReference) {
  const AttnCase cases[] = {
      // Tq  Tk  Hq Hkv   D  q_pos0 window
      {9, 9, 4, 2, 16, 0, 0},       // prefill from an empty cache, GQA 2:1
      {1, 21, 6, 2, 24, 20, 0},     // single-token decode, GQA 3:1
      {5, 12, 4, 4, 37, 7, 0},      // chunk appended to a cache, MHA, odd head size
      {10, 40, 8, 1, 64, 30, 8},    // sliding window 8, MQA
      {3, 13, 2, 1, 9, 10, 100},    // window wider than the context
      {4, 4, 3, 3, 5, 0, 1},        // window 1: each query sees only itself
      {1, 1, 1, 1, 1, 0, 0},        // the smallest case
      {6, 200, 16, 8, 128, 194, 72},  // codec-decoder-like window over a long cache
      {3, 8, 2, 1, 8, 7, 0},        // later queries reach past Tk: only keys < Tk exist
  };
  uint32_t seed = 11;
  double worst = 0.0;
  for (const auto& c : cases) worst = std::max(worst, check_attention(c, seed++));
  std::printf("attention: worst |err| / bound = %.3g\n", worst);
}

TEST_P(AttentionTest, TalkerDecodeIsThreadCountInvariant) {
  // 16 q heads over 8 kv heads of 128, a 300-entry cache: enough work to split over 3 threads.
  check_attention({4, 300, 16, 8, 128, 296, 0}, 99);
}

TEST_P(AttentionTest, QueryWithNoVisibleKeyGivesZeros) {
  // q_pos0 beyond an empty cache.
  std::vector<float> q(8, 1.0f), out(8, NAN);
  attention(q.data(), 1, 1, nullptr, nullptr, 0, 1, 8, 3, 0, 1.0f, out.data());
  for (float o : out) EXPECT_EQ(o, 0.0f);
}

CHORUS_INSTANTIATE_ISA(AttentionTest);

}  // namespace
}  // namespace chorus::cpu::test
