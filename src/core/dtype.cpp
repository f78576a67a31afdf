#include "core/dtype.h"

#include <cmath>

namespace chorus {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  static constexpr struct { std::string_view name; DType dt; } kTable[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"F64", DType::kF64},
      {"I64", DType::kI64}, {"I32", DType::kI32}, {"I16", DType::kI16}, {"I8", DType::kI8},
      {"U8", DType::kU8},   {"BOOL", DType::kBool},
  };
  for (const auto& e : kTable)
    if (e.name == n) return e.dt;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal or zero in f16: round m * 2^-24
    float a;
    std::memcpy(&a, &absx, 4);
    const float scaled = a * 16777216.0f;  // exact: 2^24
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  r -= 0x38000000u;                                  // rebias exponent 127 -> 15
  return static_cast<uint16_t>(sign | (r >> 13));
}

void convert_to_f32(DType dt, const void* src, float* dst, size_t n) {
  switch (dt) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kF64: {
      const auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) dst[i] = 0.0f;  // callers only pass float dtypes
  }
}

}  // namespace chorus
