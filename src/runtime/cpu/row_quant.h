// Weight-only quantisation for the CUDA kernels, done on the host at load from the checkpoint's
// weights. The codes and scales are laid out by rows, so a GPU warp reads a weight row as one
// contiguous stream and a block of rows is one bulk copy.
//
//   int8: the numbers of the CPU format (quant.h: symmetric, one f16 scale per row and group of
//         32 columns, q in [−127, 127], d = max|w| / 127), taken from cpu::QuantMatrix itself;
//         only the layout differs, so a CPU and a GPU int8 model hold the same weights.
//   fp8:  E4M3 codes (sign, 4 exponent bits of bias 7, 3 mantissa bits; largest finite ±448,
//         subnormals m·2⁻⁹, no infinities, 0x7F / 0xFF are NaN and never produced), one f16 scale
//         per row and group of 32: d = f16(max|w| / 448), code = e4m3(w / d) rounded to nearest
//         (ties to even) and saturated to ±448.
//
// Layout: codes[r·cols + c] (one byte per weight), scales[r·groups() + c / 32] (f16 bits; the last
// group may be partial). w(r, c) = decode(code) · d, which is exact in f32 (a code has at most 8
// significant bits, an f16 scale 11), so every kernel that multiplies in f32 sees the same weight.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"

namespace chorus::cpu {

struct RowQuantMatrix {
  static constexpr int64_t kGroup = 32;  // columns per scale

  WeightFormat format = WeightFormat::kBf16;  // kInt8 or kFp8 once made
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;    // [rows, cols]
  std::vector<uint16_t> scales;  // [rows, groups()] f16 bits

  int64_t groups() const { return (cols + kGroup - 1) / kGroup; }
  size_t bytes() const { return codes.size() + scales.size() * sizeof(uint16_t); }
  // The weight (r, c) the kernels multiply by.
  float value(int64_t r, int64_t c) const;
};

// kInvalidArgument for bf16 (not a quantised format), an empty or non-float matrix, weights that
// are not finite or whose scale does not fit f16; kUnsupported for int4 (no GPU kernels).
Result<RowQuantMatrix> quantize_rows(const MatrixRef& w, WeightFormat format, ThreadPool* pool = nullptr);

// The same codes and scales as `q` (an int8 matrix) in the row layout.
Result<RowQuantMatrix> row_layout(const QuantMatrix& q, ThreadPool* pool = nullptr);

// E4M3 ↔ f32. The decode is exact (NaN for 0x7F and 0xFF); the encode rounds to the nearest
// code, ties to the even code, saturates finite and infinite magnitudes above 448 to ±448, and
// gives 0x7F for NaN.
float e4m3_to_f32(uint8_t code);
uint8_t f32_to_e4m3(float v);

}  // namespace chorus::cpu
