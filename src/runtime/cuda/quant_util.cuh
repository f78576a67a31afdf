// Device-side decoding of quantised weights (runtime/cpu/row_quant.h), shared by the quantised
// matrix-vector kernels (linear_quant.cu) and the persistent decoder stack (decode_stack.cu), so
// both multiply by the same f32 weights.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "runtime/cpu/weight_format.h"

namespace chorus::cuda::dev {

// Code formats as template arguments: 0 is bf16 (no codes).
inline constexpr int kQInt8 = 1, kQFp8 = 2;
inline constexpr int quant_kind(cpu::WeightFormat f) {
  return f == cpu::WeightFormat::kInt8 ? kQInt8 : f == cpu::WeightFormat::kFp8 ? kQFp8 : 0;
}

// Codes per lane and chunk: lane l of a warp reads codes k = 16·l + 512·i of a row (one 16-byte
// load, within one group of 32), and sums its products in (i, k) order before the warp's
// butterfly. Every quantised kernel keeps this order, so a row's result does not depend on the
// kernel that computed it.
inline constexpr int kCodeChunk = 16;
inline constexpr int kCodeStride = 32 * kCodeChunk;  // codes a warp covers per chunk

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Sixteen codes (16 bytes, memory order) and their group's scale d → w[j] = decode(code_j) · d.
// The product is exact in f32 (row_quant.h), so the rounding mode of the multiply does not matter.
template <int QF>
__device__ __forceinline__ void dequant16(uint4 c, float d, float (&w)[16]) {
  const uint32_t v[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (QF == kQInt8) {
      // Without a conversion instruction (those run at a fraction of the FMA rate): code + 128 as
      // the low byte of the float 2²³ (exact), minus 2²³ + 128, is the code exactly.
      const uint32_t u = v[i] ^ 0x80808080u;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float q = __fsub_rn(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650u | b)), 8388736.0f);
        w[4 * i + b] = __fmul_rn(q, d);
      }
    } else {
      // cvt.rn.f16x2.e4m3x2 (sm_89+): two codes → two f16, exactly; the low byte is the first.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __half2_raw r =
            __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v[i] >> (16 * h)), __NV_E4M3);
        const float2 f = __half22float2(__half2(r));
        w[4 * i + 2 * h] = __fmul_rn(f.x, d);
        w[4 * i + 2 * h + 1] = __fmul_rn(f.y, d);
      }
    }
  }
}

// Sixteen codes from global memory, kept out of L1, with the L2 policy of the weight loads.
__device__ __forceinline__ uint4 load_codes(const uint8_t* p, uint64_t policy) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(policy));
  return r;
}

}  // namespace chorus::cuda::dev
