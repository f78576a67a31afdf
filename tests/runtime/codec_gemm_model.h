// The model arithmetic of the codec GEMM's CPU tests (codec_gemm_emulation_test.cpp,
// codec_gemm_wide_test.cpp), written independently of runtime/cuda: the TF32 and bf16 roundings,
// the warp-wide mma of the PTX ISA's fragment layouts on a model (exact products summed in double
// in k order, rounded once), and the contract of codec_elements.h for one element on that model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cuda/codec_elements.h"

namespace chorus::cuda::codec_ops::gemm_model {

inline uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// TF32 rounding written independently: to 11 significant bits, nearest with ties away from zero
// (std::round), or, below the normal range, to multiples of 2^-136 (bit 13 of a subnormal).
inline float tf32_reference(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  const double ax = std::fabs(static_cast<double>(x));
  double step;
  if (ax < std::ldexp(1.0, -126)) {
    step = std::ldexp(1.0, -136);
  } else {
    int e;
    std::frexp(ax, &e);  // ax in [2^(e-1), 2^e)
    step = std::ldexp(1.0, e - 11);
  }
  const double r = std::round(ax / step) * step;
  if (r > 3.4028234663852886e38) return std::copysign(INFINITY, x);  // rounded past the largest f32
  return static_cast<float>(std::copysign(r, static_cast<double>(x)));
}

// bf16 rounding written independently: to 8 significant bits, nearest with ties to even
// (nearbyint in the default rounding mode), or, below the normal range, to multiples of 2^-133.
inline float bf16_reference(float x) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  const double ax = std::fabs(static_cast<double>(x));
  double step;
  if (ax < std::ldexp(1.0, -126)) {
    step = std::ldexp(1.0, -133);
  } else {
    int e;
    std::frexp(ax, &e);
    step = std::ldexp(1.0, e - 8);
  }
  const double r = std::nearbyint(ax / step) * step;
  if (r > 3.4028234663852886e38) return std::copysign(INFINITY, x);
  return static_cast<float>(std::copysign(r, static_cast<double>(x)));
}

struct Problem {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  std::vector<float> A, B, C0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float a(int64_t m, int64_t k) const { return ta ? A[k * lda + m] : A[m * lda + k]; }
  float b(int64_t k, int64_t n) const { return tb ? B[n * ldb + k] : B[k * ldb + n]; }
};

// `pad_a`, `pad_b`: added to the leading dimensions (a multiple of 4 keeps rows 16-byte aligned).
inline Problem make_problem(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta, uint32_t seed,
                            int pad_a = 3, int pad_b = 5) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Problem p;
  p.ta = ta;
  p.tb = tb;
  p.M = M;
  p.N = N;
  p.K = K;
  p.beta = beta;
  p.lda = (ta ? M : K) + pad_a;
  p.ldb = (tb ? K : N) + pad_b;
  p.ldc = N + 2;
  p.A.resize(static_cast<size_t>((ta ? K : M) * p.lda));
  p.B.resize(static_cast<size_t>((tb ? N : K) * p.ldb));
  p.C0.resize(static_cast<size_t>(M * p.ldc));
  for (auto* v : {&p.A, &p.B, &p.C0})
    for (float& x : *v) x = d(rng);
  return p;
}

// One mma.m16n8k8 of a warp on the model arithmetic: d[lane] holds lane's C/D fragment, a[lane]
// and b[lane] its A and B fragments (PTX ISA layout, written out here). The hardware reads only the
// TF32 bits of an operand, so the model does too.
inline void mma_model(float (&d)[32][4], const float (&a)[32][4], const float (&b)[32][2]) {
  auto tf32_bits_only = [](float x) {
    const uint32_t u = bits(x) & 0xffffe000u;
    float y;
    std::memcpy(&y, &u, sizeof y);
    return y;
  };
  float A[16][8], B[8][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    A[g][t] = a[lane][0];
    A[g + 8][t] = a[lane][1];
    A[g][t + 4] = a[lane][2];
    A[g + 8][t + 4] = a[lane][3];
    B[t][g] = b[lane][0];
    B[t + 4][g] = b[lane][1];
    C[g][2 * t] = d[lane][0];
    C[g][2 * t + 1] = d[lane][1];
    C[g + 8][2 * t] = d[lane][2];
    C[g + 8][2 * t + 1] = d[lane][3];
  }
  float D[16][8];
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      double s = C[r][c];
      for (int k = 0; k < 8; ++k) s += static_cast<double>(tf32_bits_only(A[r][k])) * tf32_bits_only(B[k][c]);
      D[r][c] = static_cast<float>(s);
    }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    d[lane][0] = D[g][2 * t];
    d[lane][1] = D[g][2 * t + 1];
    d[lane][2] = D[g + 8][2 * t];
    d[lane][3] = D[g + 8][2 * t + 1];
  }
}

// One mma.m16n8k16 (.bf16) of a warp on the model arithmetic: a[lane][2·i + h] and b[lane][2·i + h]
// are lane's operands as the PTX ISA lays them out (written out here), already rounded to bf16.
inline void mma16_model(float (&d)[32][4], const float (&a)[32][8], const float (&b)[32][4]) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = a[lane][h];
      A[g + 8][2 * t + h] = a[lane][2 + h];
      A[g][2 * t + 8 + h] = a[lane][4 + h];
      A[g + 8][2 * t + 8 + h] = a[lane][6 + h];
      B[2 * t + h][g] = b[lane][h];
      B[2 * t + 8 + h][g] = b[lane][2 + h];
    }
    C[g][2 * t] = d[lane][0];
    C[g][2 * t + 1] = d[lane][1];
    C[g + 8][2 * t] = d[lane][2];
    C[g + 8][2 * t + 1] = d[lane][3];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int q = 0; q < 4; ++q) {
      const int r = g + 8 * (q >> 1), c = 2 * t + (q & 1);
      double s = C[r][c];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(A[r][k]) * B[k][c];
      d[lane][q] = static_cast<float>(s);
    }
  }
}

// The bf16 contract for one element on the model arithmetic: per chunk, from +0, k-steps of 16
// (zero past the chunk's end) of operands rounded to bf16, one model mma each; chunk sums added in
// order; the epilogue.
inline float contract_element_bf16(const Problem& p, int64_t m, int64_t n) {
  float sum = 0.0f;
  for (int64_t c = 0; c < gemm_chunks(p.K); ++c) {
    const int64_t k0 = c * kGemmKChunk, k1 = std::min(p.K, k0 + kGemmKChunk);
    float acc = 0.0f;
    for (int64_t s = k0; s < k1; s += 16) {
      double t = acc;
      for (int k = 0; k < 16; ++k)
        if (s + k < k1) t += static_cast<double>(bf16_reference(p.a(m, s + k))) * bf16_reference(p.b(s + k, n));
      acc = static_cast<float>(t);
    }
    sum = c == 0 ? acc : sum + acc;
  }
  float v = p.alpha == 1.0f ? sum : p.alpha * sum;
  if (p.beta != 0.0f) v = v + p.beta * p.C0[static_cast<size_t>(m * p.ldc + n)];
  return v;
}

// The contract for one element on the model arithmetic, written out with no tiles: per chunk, from
// +0, k-steps of 8 (zero past the chunk's end), three model mma in the order lo·hi, hi·lo, hi·hi;
// chunk sums added in order; the epilogue.
inline float contract_element(const Problem& p, int64_t m, int64_t n) {
  auto step = [](float acc, const float (&x)[8], const float (&y)[8]) {
    double s = acc;
    for (int k = 0; k < 8; ++k) s += static_cast<double>(x[k]) * y[k];
    return static_cast<float>(s);
  };
  float sum = 0.0f;
  for (int64_t c = 0; c < gemm_chunks(p.K); ++c) {
    const int64_t k0 = c * kGemmKChunk, k1 = std::min(p.K, k0 + kGemmKChunk);
    float acc = 0.0f;
    for (int64_t s = k0; s < k1; s += 8) {
      float ah[8], al[8], bh[8], bl[8];
      for (int k = 0; k < 8; ++k) {
        const bool in = s + k < k1;
        ah[k] = tf32_reference(in ? p.a(m, s + k) : 0.0f);
        al[k] = tf32_reference(in ? p.a(m, s + k) - ah[k] : 0.0f);
        bh[k] = tf32_reference(in ? p.b(s + k, n) : 0.0f);
        bl[k] = tf32_reference(in ? p.b(s + k, n) - bh[k] : 0.0f);
      }
      acc = step(acc, al, bh);
      acc = step(acc, ah, bl);
      acc = step(acc, ah, bh);
    }
    sum = c == 0 ? acc : sum + acc;
  }
  float v = p.alpha == 1.0f ? sum : p.alpha * sum;
  if (p.beta != 0.0f) v = v + p.beta * p.C0[static_cast<size_t>(m * p.ldc + n)];
  return v;
}

// Elements of C that differ from the contract, plus any change to the columns of ldc past N.
inline int64_t differing_from_contract(const Problem& p, const std::vector<float>& C,
                                       GemmPrecision precision = GemmPrecision::kF32) {
  int64_t wrong = 0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t c = 0; c < p.ldc; ++c) {
      const size_t at = static_cast<size_t>(m * p.ldc + c);
      const float want = c >= p.N                                ? p.C0[at]
                         : precision == GemmPrecision::kBf16 ? contract_element_bf16(p, m, c)
                                                                 : contract_element(p, m, c);
      wrong += bits(C[at]) != bits(want);
    }
  return wrong;
}

// max |C − exact| / (Σ|a·b| + |beta·C0|) over [M, N).
inline double relative_error(const Problem& p, const std::vector<float>& C) {
  double worst = 0;
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      const size_t at = static_cast<size_t>(m * p.ldc + n);
      double exact = 0, mag = 1e-30;
      for (int64_t k = 0; k < p.K; ++k) {
        const double t = static_cast<double>(p.a(m, k)) * p.b(k, n);
        exact += t;
        mag += std::fabs(t);
      }
      exact = p.alpha * exact + static_cast<double>(p.beta) * p.C0[at];
      mag = std::fabs(p.alpha) * mag + std::fabs(static_cast<double>(p.beta) * p.C0[at]);
      const double e = std::fabs(C[at] - exact) / mag;
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  return worst;
}

}  // namespace chorus::cuda::codec_ops::gemm_model
