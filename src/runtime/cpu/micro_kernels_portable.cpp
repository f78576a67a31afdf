// Portable C++ versions of the micro kernels (any CPU). They follow the same per-element reduction
// order as the AVX2 versions (see micro_kernels.h), so the two differ only by the rounding of fused
// versus separate multiply-adds.
#include <algorithm>
#include <cmath>

#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/micro_tile_dispatch.h"

namespace chorus::cpu::detail {
namespace {

struct F32W {
  using T = float;
  static float get(const float* p) { return *p; }
};
struct Bf16W {
  using T = uint16_t;
  static float get(const uint16_t* p) { return bf16_to_f32(*p); }
};
struct F16W {
  using T = uint16_t;
  static float get(const uint16_t* p) { return f16_to_f32(*p); }
};

float lane_tree(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

struct Tiles {  // the dot tiles, dispatched by micro_tile_dispatch.h
  template <int MR, int NR, class W>
  static void run(int64_t K, const float* a, int64_t lda, const typename W::T* b, int64_t ldb,
                  const char* /*next: a prefetch in this loop kept GCC from vectorising it*/,
                  float* out) {
    float acc[MR][NR][8] = {};
    const int64_t k8 = K & ~int64_t{7};
    for (int64_t k = 0; k < k8; k += 8) {
      float w[NR][8];
      for (int n = 0; n < NR; ++n)
        for (int l = 0; l < 8; ++l) w[n][l] = W::get(b + n * ldb + k + l);
      for (int m = 0; m < MR; ++m)
        for (int n = 0; n < NR; ++n)
          for (int l = 0; l < 8; ++l) acc[m][n][l] += a[m * lda + k + l] * w[n][l];
    }
    for (int m = 0; m < MR; ++m)
      for (int n = 0; n < NR; ++n) {
        float s = lane_tree(acc[m][n]);
        for (int64_t k = k8; k < K; ++k) s += a[m * lda + k] * W::get(b + n * ldb + k);
        out[m * NR + n] = s;
      }
  }
};

constexpr int64_t kPanelCols = 16;

template <int MR>
void axpy_t(int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
            const float* const* brows, int64_t col0, const float* init, float* c, int64_t ldc, bool resume) {
  for (int64_t n0 = 0; n0 < ncols; n0 += kPanelCols) {
    const int64_t nc = std::min(kPanelCols, ncols - n0);
    float acc[MR][kPanelCols];
    for (int m = 0; m < MR; ++m)
      for (int64_t n = 0; n < kPanelCols; ++n)
        acc[m][n] = resume && n < nc ? c[m * ldc + n0 + n] : init ? init[m] : 0.0f;
    for (int64_t r = 0; r < R; ++r) {
      const float* br = brows[r] + col0 + n0;
      for (int m = 0; m < MR; ++m) {
        const float av = a[m * a_sm + r * a_sr];
        for (int64_t n = 0; n < nc; ++n) acc[m][n] += av * br[n];
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int64_t n = 0; n < nc; ++n) c[m * ldc + n0 + n] = acc[m][n];
  }
}

void axpy_panel(int mr, int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
                const float* const* brows, int64_t col0, const float* init, float* c,
                int64_t ldc, bool resume) {
  switch (mr) {
    case 1: return axpy_t<1>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    case 2: return axpy_t<2>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    case 3: return axpy_t<3>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    default: return axpy_t<4>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
  }
}

// One row's group of dequantised weights (quant layout in micro_kernels.h).
void dequant_group(WeightFormat f, const uint8_t* codes, float d, float m, float* w) {
  if (f == WeightFormat::kInt8) {
    for (int j = 0; j < kQuantGroup; ++j) w[j] = static_cast<float>(static_cast<int8_t>(codes[j])) * d;
  } else {
    // q·d is exact (4-bit × 11-bit significands), so this is the one rounding of q·d + m.
    for (int j = 0; j < kQuantGroup / 2; ++j) {
      w[j] = static_cast<float>(codes[j] & 15) * d + m;
      w[j + kQuantGroup / 2] = static_cast<float>(codes[j] >> 4) * d + m;
    }
  }
}

template <int MR>
void qdot_t(WeightFormat f, int64_t groups, const float* a, int64_t lda, const uint8_t* codes,
            const uint16_t* scales, float* out) {
  const int64_t code_bytes = quant_code_bytes(f), nscales = quant_scales(f);
  float acc[MR][kQuantRows][16] = {};
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* s = scales + g * kQuantRows * nscales;
    for (int r = 0; r < kQuantRows; ++r) {
      float w[kQuantGroup];
      const float m = f == WeightFormat::kInt4 ? f16_to_f32(s[kQuantRows + r]) : 0.0f;
      dequant_group(f, codes + (g * kQuantRows + r) * code_bytes, f16_to_f32(s[r]), m, w);
      for (int i = 0; i < MR; ++i) {
        const float* x = a + i * lda + g * kQuantGroup;
        for (int h = 0; h < kQuantGroup; h += 16)
          for (int l = 0; l < 16; ++l) acc[i][r][l] += x[h + l] * w[h + l];
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < kQuantRows; ++r) {
      float u[8];
      for (int l = 0; l < 8; ++l) u[l] = acc[i][r][l] + acc[i][r][l + 8];
      out[i * kQuantRows + r] = lane_tree(u);
    }
}

// sin²(x) for |x| <= kSnakeMaxArg, with only multiplies and adds so the loop vectorises (the
// library sinf is ~10x slower and dominated the codec's non-convolution time). x is reduced to
// r = x − kπ (π in three parts, k·P1 and k·P2 exact for |k| < 4096); sin²(x) = sin²(r), so the
// sign of (−1)^k never matters. sin(r) = r + r·u·p(u), u = r², p fitted for relative error on
// [0, π/2] (about 2 ulp). The AVX-512 version repeats these operations in this order.
inline float sin_squared(float x) {
  constexpr float kInvPi = 0.318309873f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: (v + kRound) − kRound rounds v to an integer
  const float k = (x * kInvPi + kRound) - kRound;
  float r = x - k * 3.140625f;
  r = r - k * 9.67502593994140625e-4f;
  r = r - k * 1.509958025e-7f;
  const float u = r * r;
  float p = -2.39174156e-8f;
  p = p * u + 2.75271282e-6f;
  p = p * u - 1.98409049e-4f;
  p = p * u + 8.33333097e-3f;
  p = p * u - 1.66666672e-1f;
  const float s = r + (r * u) * p;
  return s * s;
}

}  // namespace

void portable_snake_row(const float* x, int64_t n, float a, float ib, float* y) {
  for (int64_t t = 0; t < n; ++t) y[t] = x[t] + ib * sin_squared(x[t] * a);
}

void portable_qdot_tile(WeightFormat f, int mr, int64_t groups, const float* a, int64_t lda,
                        const uint8_t* codes, const uint16_t* scales, float* out) {
  switch (mr) {
    case 1: return qdot_t<1>(f, groups, a, lda, codes, scales, out);
    case 2: return qdot_t<2>(f, groups, a, lda, codes, scales, out);
    case 3: return qdot_t<3>(f, groups, a, lda, codes, scales, out);
    default: return qdot_t<4>(f, groups, a, lda, codes, scales, out);
  }
}

void portable_quantize_q8(const float* x, int64_t lda, int64_t M, int64_t groups, int8_t* q, float* scale,
                          float* sum) {
  const int64_t G = kQuantGroup, width = groups * G;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = x + m * lda + g * G;
      float amax = 0.0f, total = 0.0f;
      for (int64_t j = 0; j < G; ++j) {
        amax = std::max(amax, std::fabs(xg[j]));
        total += xg[j];
      }
      const float s = amax / 127.0f;
      // min before max: a NaN quotient (x NaN, or s infinite) becomes 127, defined and the same
      // in every table.
      int8_t* qg = q + m * width + g * G;
      for (int64_t j = 0; j < G; ++j)
        qg[j] = s > 0.0f ? static_cast<int8_t>(std::max(-127.0f, std::min(127.0f, std::nearbyint(xg[j] / s)))) : 0;
      scale[m * groups + g] = s;
      sum[m * groups + g] = total;
    }
}

const MicroKernels& portable_kernels() {
  static const MicroKernels k{"portable", dot_tile_of<Tiles, F32W, Bf16W, F16W>, axpy_panel, portable_qdot_tile, nullptr, portable_snake_row};
  return k;
}

}  // namespace chorus::cpu::detail
