// Load-time quantisation in the row layout of the CUDA kernels (row_quant.h).
#include "runtime/cpu/row_quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"

namespace chorus::cpu {

namespace {

constexpr float kE4m3Max = 448.0f;

// One row of fp8 codes and scales; false when a weight is not finite or a scale does not fit f16.
bool quantize_fp8_row(const float* w, int64_t cols, uint8_t* codes, uint16_t* scales) {
  constexpr int64_t G = RowQuantMatrix::kGroup;
  for (int64_t g0 = 0; g0 < cols; g0 += G) {
    const int64_t n = std::min(G, cols - g0);
    float amax = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      if (!std::isfinite(w[g0 + j])) return false;
      amax = std::max(amax, std::fabs(w[g0 + j]));
    }
    const uint16_t dh = f32_to_f16(amax / kE4m3Max);
    const float d = f16_to_f32(dh);
    if (!std::isfinite(d)) return false;
    for (int64_t j = 0; j < n; ++j) codes[g0 + j] = d > 0.0f ? f32_to_e4m3(w[g0 + j] / d) : 0;
    scales[g0 / G] = dh;
  }
  return true;
}

}  // namespace

float e4m3_to_f32(uint8_t code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nanf("");
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return (code & 0x80) ? -mag : mag;
}

uint8_t f32_to_e4m3(float v) {
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const float a = std::fabs(v);
  if (a >= kE4m3Max) return sign | 0x7E;
  // Steps of 2⁻⁹ below the smallest normal (2⁻⁶), else 2^(E−3) within [2^E, 2^(E+1)). The code is
  // the step count continued across binades: a count of 16 is the next binade's mantissa 0.
  int ex = 0;
  std::frexp(a, &ex);  // a = f·2^ex, f in [0.5, 1)
  const int E = ex - 1;
  int code = 0;
  if (a < std::ldexp(1.0f, -6)) {
    code = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
  } else {
    const int q = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - E)));  // in [8, 16]
    code = ((E + 7) << 3) + (q - 8);
  }
  return static_cast<uint8_t>(sign | std::min(code, 0x7E));
}

float RowQuantMatrix::value(int64_t r, int64_t c) const {
  const uint8_t q = codes[static_cast<size_t>(r * cols + c)];
  const float d = f16_to_f32(scales[static_cast<size_t>(r * groups() + c / kGroup)]);
  const float w = format == WeightFormat::kFp8 ? e4m3_to_f32(q) : static_cast<float>(static_cast<int8_t>(q));
  return w * d;
}

Result<RowQuantMatrix> row_layout(const QuantMatrix& q, ThreadPool* pool) {
  if (q.format() != WeightFormat::kInt8 || q.empty())
    return make_error(ErrorCode::kInvalidArgument, "row_layout: needs a non-empty int8 matrix");
  // quant.h's tiles: rows in tiles of kQuantRows; per tile and group, each row's 32 codes, and the
  // rows' scales in a separate array.
  constexpr int64_t R = detail::kQuantRows, G = detail::kQuantGroup;
  static_assert(G == RowQuantMatrix::kGroup);
  RowQuantMatrix m;
  m.format = WeightFormat::kInt8;
  m.rows = q.rows();
  m.cols = q.cols();
  const int64_t groups = q.groups();
  m.codes.resize(static_cast<size_t>(m.rows * m.cols));
  m.scales.resize(static_cast<size_t>(m.rows * groups));
  detail::run_parallel(pool, m.rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / R, i = r % R;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t tg = t * groups + g;
        const uint8_t* src = q.codes() + (tg * R + i) * G;
        const int64_t n = std::min(G, m.cols - g * G);
        std::copy(src, src + n, m.codes.begin() + r * m.cols + g * G);
        m.scales[static_cast<size_t>(r * groups + g)] = q.scales()[tg * R + i];
      }
    }
  });
  return m;
}

Result<RowQuantMatrix> quantize_rows(const MatrixRef& w, WeightFormat format, ThreadPool* pool) {
  if (format == WeightFormat::kInt8) {
    CHORUS_ASSIGN(const QuantMatrix q, QuantMatrix::quantize(w, format, pool));
    return row_layout(q, pool);
  }
  if (format == WeightFormat::kBf16)
    return make_error(ErrorCode::kInvalidArgument, "quantize: bf16 is the as-stored format, not a quantised one");
  if (format != WeightFormat::kFp8)
    return make_error(ErrorCode::kUnsupported, std::string(weight_format_name(format)) +
                                                   " has no GPU kernels (int4 is CPU only; on CUDA use int8 or fp8)");
  if (!detail::is_weight_dtype(w.dtype) || w.rows <= 0 || w.cols <= 0)
    return make_error(ErrorCode::kInvalidArgument, "quantize: needs a non-empty float matrix (got " +
                                                       std::to_string(w.rows) + " x " + std::to_string(w.cols) + ")");
  RowQuantMatrix m;
  m.format = format;
  m.rows = w.rows;
  m.cols = w.cols;
  const int64_t groups = m.groups();
  m.codes.resize(static_cast<size_t>(m.rows * m.cols));
  m.scales.resize(static_cast<size_t>(m.rows * groups));
  const int64_t es = static_cast<int64_t>(dtype_size(w.dtype));
  const auto* base = static_cast<const uint8_t*>(w.data);
  std::atomic<bool> bad{false};
  detail::run_parallel(pool, m.rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(m.cols));
    for (int64_t r = r0; r < r1; ++r) {
      convert_to_f32(w.dtype, base + r * m.cols * es, row.data(), static_cast<size_t>(m.cols));
      if (!quantize_fp8_row(row.data(), m.cols, m.codes.data() + r * m.cols, m.scales.data() + r * groups))
        bad.store(true);
    }
  });
  if (bad.load())
    return make_error(ErrorCode::kInvalidArgument, "quantize: a weight is not finite or too large for fp8's f16 scales");
  return m;
}

}  // namespace chorus::cpu
