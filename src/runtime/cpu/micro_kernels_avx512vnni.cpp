// AVX-512 VNNI: the int4 tile on int8-quantised activations (micro_kernels.h, QuantizedRows),
// compiled with -mavx512vnni on top of the AVX-512 flags and only used after the run-time check
// in kernels.cpp. Every other block is the AVX-512 table's.
//
// A tile's group is 64 bytes: 4 rows × 16 bytes, byte j holding weights j (low nibble) and j + 16
// (high nibble). Masking the low and high nibbles gives two 64-byte vectors of unsigned codes whose
// 128-bit lanes are the rows; vpdpbusd multiplies them with x's bytes 0–15 and 16–31 (repeated in
// every lane) and sums 4 products per 32-bit lane, so lanes 4r..4r+3 hold row r's partial sums.
// Integer sums are exact; each group's is converted and scaled by d·s in f32, in group order.
#include "runtime/cpu/micro_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#include <immintrin.h>

namespace chorus::cpu::detail {
namespace {

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

template <int MR>
void qdot_int4_t(int64_t groups, const QuantizedRows& a, const uint8_t* codes, const uint16_t* scales, float* out) {
  __m512 acc[MR];
  __m128 off[MR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    acc[m] = _mm512_setzero_ps();
    off[m] = _mm_setzero_ps();
  }
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i v = _mm512_loadu_si512(codes + g * 64);
    const __m512i lo = _mm512_and_si512(v, nibble);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
    const __m256 dm = _mm256_cvtph_ps(load128(scales + g * 8));
    const __m512 d16 = _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(dm));
    const __m128 m4 = _mm256_extractf128_ps(dm, 1);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const int8_t* xq = a.q + m * a.ldq + g * kQuantGroup;
      const __m512i x0 = _mm512_broadcast_i32x4(load128(xq));
      const __m512i x1 = _mm512_broadcast_i32x4(load128(xq + 16));
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x0), hi, x1);
      const __m512 scale = _mm512_mul_ps(d16, _mm512_set1_ps(a.scale[m * a.lds + g]));
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[m]);
      off[m] = _mm_fmadd_ps(m4, _mm_set1_ps(a.sum[m * a.lds + g]), off[m]);
    }
  }
  for (int m = 0; m < MR; ++m) {
    // Row r: (lane 4r + lane 4r+2) + (lane 4r+1 + lane 4r+3), then the offsets' sum.
    const __m512 s1 = _mm512_add_ps(acc[m], _mm512_permute_ps(acc[m], 0x4e));  // swap pairs of lanes
    const __m512 s2 = _mm512_add_ps(s1, _mm512_permute_ps(s1, 0xb1));           // swap neighbours
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s2);
    alignas(16) float o[4];
    _mm_store_ps(o, off[m]);
    for (int r = 0; r < kQuantRows; ++r) out[m * kQuantRows + r] = lanes[4 * r] + o[r];
  }
}

void qdot_int4(int mr, int64_t groups, const QuantizedRows& a, const uint8_t* codes, const uint16_t* scales,
               float* out) {
  switch (mr) {
    case 1: return qdot_int4_t<1>(groups, a, codes, scales, out);
    case 2: return qdot_int4_t<2>(groups, a, codes, scales, out);
    case 3: return qdot_int4_t<3>(groups, a, codes, scales, out);
    default: return qdot_int4_t<4>(groups, a, codes, scales, out);
  }
}

// portable_quantize_q8's values: the same division and round-to-nearest-even per element, the same
// ascending sum per group, a maximum that like std::max(amax, |x|) keeps amax when |x| is NaN, and
// a NaN quotient clamped to 127 (vminps and vmaxps return their second operand when one is NaN, as
// std::min(127, v) and std::max do).
void quantize_q8(const float* x, int64_t lda, int64_t M, int64_t groups, int8_t* q, float* scale, float* sum) {
  constexpr int64_t G = kQuantGroup;
  const int64_t width = groups * G;
  const __m512 sign = _mm512_set1_ps(-0.0f), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * lda;
    for (int64_t g = 0; g < groups; ++g) {
      float total = 0.0f;  // scalar and ascending, for the portable sum's bits
      for (int64_t j = 0; j < G; ++j) total += xm[g * G + j];
      sum[m * groups + g] = total;
      const __m512 a = _mm512_loadu_ps(xm + g * G), b = _mm512_loadu_ps(xm + g * G + 16);
      const __m512 amax = _mm512_max_ps(_mm512_andnot_ps(sign, b), _mm512_max_ps(_mm512_andnot_ps(sign, a),
                                                                                  _mm512_setzero_ps()));
      const float s = _mm512_reduce_max_ps(amax) / 127.0f;
      scale[m * groups + g] = s;
      int8_t* qg = q + m * width + g * G;
      if (!(s > 0.0f)) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qg), _mm256_setzero_si256());
        continue;
      }
      const __m512 sv = _mm512_set1_ps(s);
      const auto code = [&](__m512 v) {
        const __m512 r = _mm512_roundscale_ps(_mm512_div_ps(v, sv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_max_ps(_mm512_min_ps(r, hi), lo)));
      };
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qg), code(a));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qg + 16), code(b));
    }
  }
}

}  // namespace

const MicroKernels* avx512_vnni_kernels() {
  static const MicroKernels k = [] {
    const MicroKernels* base = avx512_kernels();
    MicroKernels t{"avx512+vnni", nullptr, nullptr, nullptr, qdot_int4, nullptr};
    if (base) {
      t.dot_tile = base->dot_tile;
      t.axpy_panel = base->axpy_panel;
      t.qdot_tile = base->qdot_tile;
      t.snake_row = base->snake_row;
      t.dot_tile_rows = base->dot_tile_rows;
    }
    t.quantize_q8 = quantize_q8;
    return t;
  }();
  return avx512_kernels() ? &k : nullptr;
}

}  // namespace chorus::cpu::detail

#else  // built without the VNNI flags

namespace chorus::cpu::detail {
const MicroKernels* avx512_vnni_kernels() { return nullptr; }
}  // namespace chorus::cpu::detail

#endif
