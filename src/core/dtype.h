// Element types and the scalar conversions between them. Names follow safetensors ("F32", "BF16").
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace chorus {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);
std::optional<DType> dtype_from_name(std::string_view name);
inline bool is_float(DType dt) {
  return dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16 || dt == DType::kF64;
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Rounds f to the nearest bf16 value, kept in f32 (for "bf16 activations" modes).
inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of src (any float dtype) to f32.
void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t n);

}  // namespace chorus
