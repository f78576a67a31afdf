// AVX2 + FMA + F16C micro kernels, compiled with -mavx2 -mfma -mf16c and only called after the
// run-time CPU check in kernels.cpp. Same reduction order as the portable ones (micro_kernels.h).
//
// Everything here has internal linkage and uses only intrinsics: an inline function or template
// shared with other files (std::min, std::vector, ...) could be emitted here with AVX2
// instructions and picked by the linker for the portable code too.
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/micro_tile_dispatch.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

namespace chorus::cpu::detail {
namespace {

struct F32W {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float load1(const float* p) { return *p; }
};
struct Bf16W {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float load1(const uint16_t* p) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(*p) << 16)));
  }
};
struct F16W {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float load1(const uint16_t* p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*p)));
  }
};

inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), as the portable lane_tree.
inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

struct Tiles {  // the dot tiles, dispatched by micro_tile_dispatch.h
  template <int MR, int NR, class W>
  static void run(int64_t K, const float* a, int64_t lda, const typename W::T* b, int64_t ldb,
                  const char* next, float* out) {
    // Each 8-element step reads 8·NR elements of b; fetch as many bytes of the next block.
    constexpr int kStepBytes = 8 * NR * static_cast<int>(sizeof(typename W::T));
    __m256 acc[MR][NR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
    const int64_t k8 = K & ~int64_t{7};
    for (int64_t k = 0; k < k8; k += 8) {
      if (next) {
#pragma GCC unroll 4
        for (int off = 0; off < kStepBytes; off += 64)
          _mm_prefetch(next + (k / 8) * kStepBytes + off, _MM_HINT_T0);
      }
      __m256 xv[MR];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) xv[m] = _mm256_loadu_ps(a + m * lda + k);
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) {
        const __m256 wv = W::load8(b + n * ldb + k);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) acc[m][n] = _mm256_fmadd_ps(xv[m], wv, acc[m][n]);
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int n = 0; n < NR; ++n) {
        float s = hsum(acc[m][n]);
        for (int64_t k = k8; k < K; ++k) s = fma1(a[m * lda + k], W::load1(b + n * ldb + k), s);
        out[m * NR + n] = s;
      }
  }
};

// MR rows × (8·NV) columns of an axpy panel, accumulators in registers. (Written with unroll
// pragmas and loads inside the FMAs: with a separate array of loaded rows GCC 12 kept a stack copy
// of every accumulator and stored it on each step.)
template <int MR, int NV>
void axpy_block(int64_t R, const float* a, int64_t a_sm, int64_t a_sr, const float* const* brows,
                int64_t off, const float* init, float* c, int64_t ldc, bool resume) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const __m256 v = _mm256_set1_ps(init ? init[m] : 0.0f);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[m][j] = resume ? _mm256_loadu_ps(c + m * ldc + 8 * j) : v;
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* br = brows[r] + off;
    const float* ar = a + r * a_sr;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m256 av = _mm256_broadcast_ss(ar + m * a_sm);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j)
        acc[m][j] = _mm256_fmadd_ps(av, _mm256_loadu_ps(br + 8 * j), acc[m][j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) _mm256_storeu_ps(c + m * ldc + 8 * j, acc[m][j]);
}

// Fewer than 8 columns: one fused multiply-add per element and step, as in the vector lanes.
template <int MR>
void axpy_scalar(int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
                 const float* const* brows, int64_t off, const float* init, float* c,
                 int64_t ldc, bool resume) {
  float acc[MR][8];
  for (int m = 0; m < MR; ++m)
    for (int64_t n = 0; n < ncols; ++n) acc[m][n] = resume ? c[m * ldc + n] : init ? init[m] : 0.0f;
  for (int64_t r = 0; r < R; ++r) {
    const float* br = brows[r] + off;
    for (int m = 0; m < MR; ++m) {
      const float av = a[m * a_sm + r * a_sr];
      for (int64_t n = 0; n < ncols; ++n) acc[m][n] = fma1(av, br[n], acc[m][n]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int64_t n = 0; n < ncols; ++n) c[m * ldc + n] = acc[m][n];
}

// Wide blocks of NV vectors first (few rows: wider, to keep enough accumulators in flight),
// then single vectors, then scalars.
template <int MR, int NV>
void axpy_t(int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
            const float* const* brows, int64_t col0, const float* init, float* c, int64_t ldc, bool resume) {
  int64_t n = 0;
  for (; n + 8 * NV <= ncols; n += 8 * NV)
    axpy_block<MR, NV>(R, a, a_sm, a_sr, brows, col0 + n, init, c + n, ldc, resume);
  for (; n + 8 <= ncols; n += 8)
    axpy_block<MR, 1>(R, a, a_sm, a_sr, brows, col0 + n, init, c + n, ldc, resume);
  if (n < ncols) axpy_scalar<MR>(ncols - n, R, a, a_sm, a_sr, brows, col0 + n, init, c + n, ldc, resume);
}

void axpy_panel(int mr, int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
                const float* const* brows, int64_t col0, const float* init, float* c,
                int64_t ldc, bool resume) {
  switch (mr) {
    case 1: return axpy_t<1, 8>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    case 2: return axpy_t<2, 4>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    case 3: return axpy_t<3, 3>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    default: return axpy_t<4, 3>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
  }
}

// Quantised tiles (layout in micro_kernels.h), the portable tile's 16 lanes as two 8-lane halves
// (k mod 16 < 8 and >= 8), fused: each row's group is dequantised exactly (q·d, q·d + m) into four
// vectors of 8, then multiplied into every x row.
template <int MR, bool kInt4>
void qdot_t(int64_t groups, const float* a, int64_t lda, const uint8_t* codes, const uint16_t* scales,
            float* out) {
  constexpr int kCodeBytes = kInt4 ? kQuantGroup / 2 : kQuantGroup;
  constexpr int kScales = kInt4 ? 2 * kQuantRows : kQuantRows;
  __m256 lo[MR][kQuantRows], hi[MR][kQuantRows];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int r = 0; r < kQuantRows; ++r) lo[m][r] = hi[m][r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi32(15);
  alignas(32) float sf[8];
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* s = scales + g * kScales;
    if (kInt4) {
      _mm256_store_ps(sf, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))));
    } else {
      _mm_store_ps(sf, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s))));
    }
    const uint8_t* cg = codes + g * kQuantRows * kCodeBytes;
#pragma GCC unroll 4
    for (int r = 0; r < kQuantRows; ++r) {
      const __m256 d = _mm256_set1_ps(sf[r]);
      __m256 w[4];  // weights 0–7, 8–15, 16–23, 24–31 of the group
      if (kInt4) {
        const __m256 m = _mm256_set1_ps(sf[kQuantRows + r]);
        for (int h = 0; h < 2; ++h) {
          const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(cg + r * kCodeBytes + 8 * h)));
          w[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, low4)), d, m);
          w[h + 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), d, m);
        }
      } else {
        for (int h = 0; h < 4; ++h)
          w[h] = _mm256_mul_ps(
              _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(cg + r * kCodeBytes + 8 * h)))),
              d);
      }
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const float* x = a + m * lda + g * kQuantGroup;
        lo[m][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x), w[0], lo[m][r]);
        hi[m][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), w[1], hi[m][r]);
        lo[m][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), w[2], lo[m][r]);
        hi[m][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), w[3], hi[m][r]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < kQuantRows; ++r) out[m * kQuantRows + r] = hsum(_mm256_add_ps(lo[m][r], hi[m][r]));
}

void qdot_tile(WeightFormat f, int mr, int64_t groups, const float* a, int64_t lda, const uint8_t* codes,
               const uint16_t* scales, float* out) {
  const bool int4 = f == WeightFormat::kInt4;
  switch (mr) {
    case 1: return int4 ? qdot_t<1, true>(groups, a, lda, codes, scales, out) : qdot_t<1, false>(groups, a, lda, codes, scales, out);
    case 2: return int4 ? qdot_t<2, true>(groups, a, lda, codes, scales, out) : qdot_t<2, false>(groups, a, lda, codes, scales, out);
    case 3: return int4 ? qdot_t<3, true>(groups, a, lda, codes, scales, out) : qdot_t<3, false>(groups, a, lda, codes, scales, out);
    default: return int4 ? qdot_t<4, true>(groups, a, lda, codes, scales, out) : qdot_t<4, false>(groups, a, lda, codes, scales, out);
  }
}

}  // namespace

const MicroKernels* avx2_kernels() {
  static const MicroKernels k{"avx2+fma", dot_tile_of<Tiles, F32W, Bf16W, F16W>, axpy_panel, qdot_tile, nullptr, portable_snake_row};
  return &k;
}

}  // namespace chorus::cpu::detail

#else  // built without the AVX2 flags (a non-x86 target): no vector version

namespace chorus::cpu::detail {
const MicroKernels* avx2_kernels() { return nullptr; }
}  // namespace chorus::cpu::detail

#endif
