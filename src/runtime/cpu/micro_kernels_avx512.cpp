// AVX-512 (F, BW, VL, DQ) micro kernels, compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
// (and AVX2/FMA/F16C) and only called after the run-time CPU check in kernels.cpp.
//
// On float weights they give the AVX2 kernels' results bit for bit, which keeps the CPU reference
// independent of the machine: dot_tile keeps the 8-lane order of micro_kernels.h by holding two
// weight rows in one 16-lane register (lanes 0–7 row n, 8–15 row n + 1, x repeated in both
// halves), and axpy_panel's lanes are independent columns anyway (a masked tail replaces the AVX2
// scalar loop: the same single fused multiply-add per element).
//
// As in micro_kernels_avx2.cpp, everything has internal linkage and uses only intrinsics, so no
// AVX-512 instruction can leak into code shared with the portable path.
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/micro_tile_dispatch.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <type_traits>

namespace chorus::cpu::detail {
namespace {

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Two 8-element row pieces a (lanes 0–7) and b (lanes 8–15) as f32.
struct F32W {
  using T = float;
  static __m512 load2(const float* a, const float* b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
  }
  static __m256 load1(const float* a) { return _mm256_loadu_ps(a); }
  static float scalar(const float* p) { return *p; }
};
struct Bf16W {
  using T = uint16_t;
  static __m512 load2(const uint16_t* a, const uint16_t* b) {
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(a)), load128(b), 1);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m256 load1(const uint16_t* a) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(a)), 16));
  }
  static float scalar(const uint16_t* p) {
    return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(*p) << 16)));
  }
};
struct F16W {
  using T = uint16_t;
  static __m512 load2(const uint16_t* a, const uint16_t* b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(load128(a)), load128(b), 1));
  }
  static __m256 load1(const uint16_t* a) { return _mm256_cvtph_ps(load128(a)); }
  static float scalar(const uint16_t* p) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*p))); }
};

inline float fma1(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), as the AVX2 and portable kernels.
inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

struct Tiles {  // the dot tiles, dispatched by micro_tile_dispatch.h
  template <int MR, int NR, class W>
  static void run(int64_t K, const float* a, int64_t lda, const typename W::T* b, int64_t ldb,
                  const char* next, float* out) {
    constexpr int NP = NR / 2, NS = NR % 2;  // row pairs, single row
    constexpr int kStepBytes = 8 * NR * static_cast<int>(sizeof(typename W::T));
    __m512 acc2[MR][NP > 0 ? NP : 1];
    __m256 acc1[MR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) acc2[m][p] = _mm512_setzero_ps();
      acc1[m] = _mm256_setzero_ps();
    }
    const int64_t k8 = K & ~int64_t{7};
    for (int64_t k = 0; k < k8; k += 8) {
      if (next) {
#pragma GCC unroll 4
        for (int off = 0; off < kStepBytes; off += 64)
          _mm_prefetch(next + (k / 8) * kStepBytes + off, _MM_HINT_T0);
      }
      __m512 xv[MR];
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) xv[m] = _mm512_broadcast_f32x8(_mm256_loadu_ps(a + m * lda + k));
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) {
        const __m512 wv = W::load2(b + (2 * p) * ldb + k, b + (2 * p + 1) * ldb + k);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) acc2[m][p] = _mm512_fmadd_ps(xv[m], wv, acc2[m][p]);
      }
      if (NS) {
        const __m256 wv = W::load1(b + (NR - 1) * ldb + k);
#pragma GCC unroll 4
        for (int m = 0; m < MR; ++m) acc1[m] = _mm256_fmadd_ps(_mm512_castps512_ps256(xv[m]), wv, acc1[m]);
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int n = 0; n < NR; ++n) {
        __m256 v;
        if (n / 2 < NP) {
          const __m512 p = acc2[m][n / 2];
          v = n % 2 ? _mm512_extractf32x8_ps(p, 1) : _mm512_castps512_ps256(p);
        } else {
          v = acc1[m];
        }
        float s = hsum8(v);
        for (int64_t k = k8; k < K; ++k) s = fma1(a[m * lda + k], W::scalar(b + n * ldb + k), s);
        out[m * NR + n] = s;
      }
  }
};

// MR rows × (16·NV) columns of an axpy panel, accumulators in registers (loads inside the FMAs, as
// in the AVX2 version, so GCC keeps the accumulators in registers). `last` masks the block's last
// vector (a panel whose width is not a multiple of 16).
template <int MR, int NV>
void axpy_block(int64_t R, const float* a, int64_t a_sm, int64_t a_sr, const float* const* brows,
                int64_t off, const float* init, float* c, int64_t ldc, bool resume, __mmask16 last = 0xffff) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
    const __m512 v = _mm512_set1_ps(init ? init[m] : 0.0f);
#pragma GCC unroll 8
    for (int j = 0; j + 1 < NV; ++j) acc[m][j] = resume ? _mm512_loadu_ps(c + m * ldc + 16 * j) : v;
    acc[m][NV - 1] = resume ? _mm512_maskz_loadu_ps(last, c + m * ldc + 16 * (NV - 1)) : v;
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* br = brows[r] + off;
    const float* ar = a + r * a_sr;
    const __m512 tail = _mm512_maskz_loadu_ps(last, br + 16 * (NV - 1));
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m512 av = _mm512_set1_ps(ar[m * a_sm]);
#pragma GCC unroll 8
      for (int j = 0; j + 1 < NV; ++j)
        acc[m][j] = _mm512_fmadd_ps(av, _mm512_loadu_ps(br + 16 * j), acc[m][j]);
      acc[m][NV - 1] = _mm512_fmadd_ps(av, tail, acc[m][NV - 1]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 8
    for (int j = 0; j + 1 < NV; ++j) _mm512_storeu_ps(c + m * ldc + 16 * j, acc[m][j]);
    _mm512_mask_storeu_ps(c + m * ldc + 16 * (NV - 1), last, acc[m][NV - 1]);
  }
}

// Full blocks of NV vectors, then one block of the remaining vectors (the last one masked), so
// narrow remainders still keep several independent accumulator chains in flight.
template <int MR, int NV>
void axpy_t(int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
            const float* const* brows, int64_t col0, const float* init, float* c, int64_t ldc, bool resume) {
  int64_t n = 0;
  for (; n + 16 * NV <= ncols; n += 16 * NV)
    axpy_block<MR, NV>(R, a, a_sm, a_sr, brows, col0 + n, init, c + n, ldc, resume);
  const int64_t rem = ncols - n;
  if (rem == 0) return;
  const int nv = static_cast<int>((rem + 15) / 16);
  const auto last = static_cast<__mmask16>(rem % 16 ? (1u << (rem % 16)) - 1 : 0xffffu);
  const auto run = [&](auto k) {
    constexpr int kV = decltype(k)::value;
    if constexpr (kV <= NV) axpy_block<MR, kV>(R, a, a_sm, a_sr, brows, col0 + n, init, c + n, ldc, resume, last);
  };
  switch (nv) {
    case 1: return run(std::integral_constant<int, 1>{});
    case 2: return run(std::integral_constant<int, 2>{});
    case 3: return run(std::integral_constant<int, 3>{});
    case 4: return run(std::integral_constant<int, 4>{});
    case 5: return run(std::integral_constant<int, 5>{});
    case 6: return run(std::integral_constant<int, 6>{});
    case 7: return run(std::integral_constant<int, 7>{});
    default: return run(std::integral_constant<int, 8>{});
  }
}

void axpy_panel(int mr, int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
                const float* const* brows, int64_t col0, const float* init, float* c,
                int64_t ldc, bool resume) {
  switch (mr) {
    case 1: return axpy_t<1, 8>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    case 2: return axpy_t<2, 8>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    case 3: return axpy_t<3, 4>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
    default: return axpy_t<4, 4>(ncols, R, a, a_sm, a_sr, brows, col0, init, c, ldc, resume);
  }
}

// Quantised tiles (layout in micro_kernels.h): each group of a row is dequantised into two
// 16-lane vectors holding exactly QuantMatrix::value, then multiplied into every x row. int4 looks
// its values up in a per-group table of the 16 possible ones (q·d + m for q = 0..15): one
// vpermps per 16 weights, which takes the low 4 bits of each index lane, so the low nibbles need
// no masking. Scales are widened once per group and broadcast from memory (a load, not a shuffle).

// ((u0 + u4) + (u2 + u6)) + ((u1 + u5) + (u3 + u7)) of u_l = v_l + v_(l+8).
inline float tree16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

template <int MR, bool kInt4>
void qdot_t(int64_t groups, const float* a, int64_t lda, const uint8_t* codes, const uint16_t* scales,
            float* out) {
  constexpr int kCodeBytes = kInt4 ? kQuantGroup / 2 : kQuantGroup;
  constexpr int kScales = kInt4 ? 2 * kQuantRows : kQuantRows;
  __m512 acc[MR][kQuantRows];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int r = 0; r < kQuantRows; ++r) acc[m][r] = _mm512_setzero_ps();
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  alignas(32) float sf[8];
  for (int64_t g = 0; g < groups; ++g) {
    const uint16_t* s = scales + g * kScales;
    if (kInt4) {
      _mm256_store_ps(sf, _mm256_cvtph_ps(load128(s)));
    } else {
      _mm_store_ps(sf, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s))));
    }
    __m512 x0[MR], x1[MR];
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      x0[m] = _mm512_loadu_ps(a + m * lda + g * kQuantGroup);
      x1[m] = _mm512_loadu_ps(a + m * lda + g * kQuantGroup + 16);
    }
    const uint8_t* cg = codes + g * kQuantRows * kCodeBytes;
#pragma GCC unroll 4
    for (int r = 0; r < kQuantRows; ++r) {
      const __m512 d = _mm512_set1_ps(sf[r]);
      __m512 w0, w1;
      if (kInt4) {
        const __m512 table = _mm512_fmadd_ps(iota, d, _mm512_set1_ps(sf[kQuantRows + r]));
        const __m512i b = _mm512_cvtepu8_epi32(load128(cg + r * kCodeBytes));
        w0 = _mm512_permutexvar_ps(b, table);
        w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
      } else {
        w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(cg + r * kCodeBytes))), d);
        w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load128(cg + r * kCodeBytes + 16))), d);
      }
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        acc[m][r] = _mm512_fmadd_ps(x0[m], w0, acc[m][r]);
        acc[m][r] = _mm512_fmadd_ps(x1[m], w1, acc[m][r]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < kQuantRows; ++r) out[m * kQuantRows + r] = tree16(acc[m][r]);
}

template <bool kInt4>
void qdot_rows(int mr, int64_t groups, const float* a, int64_t lda, const uint8_t* codes,
               const uint16_t* scales, float* out) {
  switch (mr) {
    case 1: return qdot_t<1, kInt4>(groups, a, lda, codes, scales, out);
    case 2: return qdot_t<2, kInt4>(groups, a, lda, codes, scales, out);
    case 3: return qdot_t<3, kInt4>(groups, a, lda, codes, scales, out);
    default: return qdot_t<4, kInt4>(groups, a, lda, codes, scales, out);
  }
}

void qdot_tile(WeightFormat f, int mr, int64_t groups, const float* a, int64_t lda, const uint8_t* codes,
               const uint16_t* scales, float* out) {
  if (f == WeightFormat::kInt4) return qdot_rows<true>(mr, groups, a, lda, codes, scales, out);
  return qdot_rows<false>(mr, groups, a, lda, codes, scales, out);
}

// The portable snake row's operations in its order, 16 lanes at a time, with separate multiplies
// and adds (this file is compiled with -ffp-contract=off), so the values are the portable ones.
inline __m512 snake16(__m512 x, __m512 a, __m512 ib) {
  const auto c = [](float v) { return _mm512_set1_ps(v); };
  const __m512 v = _mm512_mul_ps(x, a);
  const __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v, c(0.318309873f)), c(12582912.0f)), c(12582912.0f));
  __m512 r = _mm512_sub_ps(v, _mm512_mul_ps(k, c(3.140625f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(k, c(9.67502593994140625e-4f)));
  r = _mm512_sub_ps(r, _mm512_mul_ps(k, c(1.509958025e-7f)));
  const __m512 u = _mm512_mul_ps(r, r);
  __m512 p = c(-2.39174156e-8f);
  p = _mm512_add_ps(_mm512_mul_ps(p, u), c(2.75271282e-6f));
  p = _mm512_sub_ps(_mm512_mul_ps(p, u), c(1.98409049e-4f));
  p = _mm512_add_ps(_mm512_mul_ps(p, u), c(8.33333097e-3f));
  p = _mm512_sub_ps(_mm512_mul_ps(p, u), c(1.66666672e-1f));
  const __m512 s = _mm512_add_ps(r, _mm512_mul_ps(_mm512_mul_ps(r, u), p));
  return _mm512_add_ps(x, _mm512_mul_ps(ib, _mm512_mul_ps(s, s)));
}

void snake_row(const float* x, int64_t n, float a, float ib, float* y) {
  const __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(ib);
  int64_t t = 0;
  for (; t + 16 <= n; t += 16) _mm512_storeu_ps(y + t, snake16(_mm512_loadu_ps(x + t), av, bv));
  if (t < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - t)) - 1);
    _mm512_mask_storeu_ps(y + t, mask, snake16(_mm512_maskz_loadu_ps(mask, x + t), av, bv));
  }
}

}  // namespace

const MicroKernels* avx512_kernels() {
  static const MicroKernels k{"avx512", dot_tile_of<Tiles, F32W, Bf16W, F16W>, axpy_panel, qdot_tile, nullptr, snake_row, kTileMax};
  return &k;
}

}  // namespace chorus::cpu::detail

#else  // built without the AVX-512 flags (a non-x86 target): no vector version

namespace chorus::cpu::detail {
const MicroKernels* avx512_kernels() { return nullptr; }
}  // namespace chorus::cpu::detail

#endif
