// Load-time quantisation (QuantMatrix) and the quantised linear driver.
#include "runtime/cpu/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"

namespace chorus::cpu {

namespace {

using detail::kQuantGroup;
using detail::kQuantRows;

std::atomic<testing::QuantFault> g_fault{testing::QuantFault::kNone};

// Codes and scales of one row's group; false when a scale does not fit f16 or a weight is not
// finite.
bool quantize_group(WeightFormat f, const float* w, uint8_t* codes, uint16_t* d_out, uint16_t* m_out) {
  float lo = w[0], hi = w[0];
  for (int j = 0; j < kQuantGroup; ++j) {
    if (!std::isfinite(w[j])) return false;
    lo = std::min(lo, w[j]);
    hi = std::max(hi, w[j]);
  }
  if (f == WeightFormat::kInt8) {
    const float amax = std::max(std::fabs(lo), std::fabs(hi));
    const uint16_t dh = f32_to_f16(amax / 127.0f);
    const float d = f16_to_f32(dh);
    if (!std::isfinite(d)) return false;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQuantGroup; ++j) {
      const float q = std::clamp(std::nearbyint(w[j] * inv), -127.0f, 127.0f);
      codes[j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
    *d_out = dh;
    return true;
  }
  const uint16_t mh = f32_to_f16(lo), dh = f32_to_f16((hi - lo) / 15.0f);
  const float m = f16_to_f32(mh), d = f16_to_f32(dh);
  if (!std::isfinite(m) || !std::isfinite(d)) return false;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[kQuantGroup];
  for (int j = 0; j < kQuantGroup; ++j) q[j] = static_cast<uint8_t>(std::clamp(std::nearbyint((w[j] - m) * inv), 0.0f, 15.0f));
  for (int j = 0; j < kQuantGroup / 2; ++j) codes[j] = static_cast<uint8_t>(q[j] | (q[j + kQuantGroup / 2] << 4));
  *d_out = dh;
  *m_out = mh;
  return true;
}

void apply_fault(testing::QuantFault fault, WeightFormat f, int64_t tiles, int64_t groups, uint16_t* scales) {
  const int64_t per_group = kQuantRows * detail::quant_scales(f);
  if (fault == testing::QuantFault::kScaleOffByOneGroup) {
    for (int64_t t = 0; t < tiles; ++t) {
      uint16_t* s = scales + t * groups * per_group;
      std::vector<uint16_t> first(s, s + per_group);
      std::memmove(s, s + per_group, static_cast<size_t>((groups - 1) * per_group) * sizeof(uint16_t));
      std::copy(first.begin(), first.end(), s + (groups - 1) * per_group);
    }
  } else if (fault == testing::QuantFault::kScaleTooLarge) {
    for (int64_t t = 0; t < tiles; ++t)
      for (int64_t g = 0; g < groups; ++g)
        for (int r = 0; r < kQuantRows; ++r) {  // d only (int4's offsets stay)
          uint16_t& d = scales[(t * groups + g) * per_group + r];
          d = f32_to_f16(f16_to_f32(d) / 0.9f);
        }
  }
}

}  // namespace

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBf16: return "bf16";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kInt4: return "int4";
    case WeightFormat::kFp8: return "fp8";
  }
  return "?";
}

std::optional<WeightFormat> weight_format_from_name(std::string_view name) {
  for (WeightFormat f : {WeightFormat::kBf16, WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kFp8})
    if (name == weight_format_name(f)) return f;
  return std::nullopt;
}

namespace testing {
void plant_quant_fault(QuantFault f) { g_fault.store(f); }
}  // namespace testing

Result<QuantMatrix> QuantMatrix::quantize(const MatrixRef& w, WeightFormat format, ThreadPool* pool) {
  if (format == WeightFormat::kBf16)
    return make_error(ErrorCode::kInvalidArgument, "quantize: bf16 is the as-stored format, not a quantised one");
  if (format != WeightFormat::kInt8 && format != WeightFormat::kInt4)
    return make_error(ErrorCode::kUnsupported, std::string(weight_format_name(format)) +
                                                   " weights run on CUDA only; the CPU kernels take bf16, int8 or int4");
  if (!detail::is_weight_dtype(w.dtype) || w.rows <= 0 || w.cols <= 0)
    return make_error(ErrorCode::kInvalidArgument, "quantize: needs a non-empty float matrix (got " +
                                                       std::to_string(w.rows) + " x " + std::to_string(w.cols) + ")");
  QuantMatrix q;
  q.format_ = format;
  q.rows_ = w.rows;
  q.cols_ = w.cols;
  const int64_t tiles = (w.rows + kQuantRows - 1) / kQuantRows, groups = (w.cols + kGroup - 1) / kGroup;
  const int64_t code_bytes = detail::quant_code_bytes(format), nscales = detail::quant_scales(format);
  q.codes_ = std::make_shared<AlignedBuffer>(static_cast<size_t>(tiles * groups * kQuantRows * code_bytes));
  q.scales_ =
      std::make_shared<AlignedBuffer>(static_cast<size_t>(tiles * groups * kQuantRows * nscales) * sizeof(uint16_t));
  uint8_t* codes = static_cast<uint8_t*>(q.codes_->data());
  uint16_t* scales = static_cast<uint16_t*>(q.scales_->data());
  const int64_t es = static_cast<int64_t>(dtype_size(w.dtype));
  const auto* base = static_cast<const uint8_t*>(w.data);
  std::atomic<bool> bad{false};
  detail::run_parallel(pool, tiles, 16, [&](int64_t t0, int64_t t1) {
    std::vector<float> row(static_cast<size_t>(groups * kGroup), 0.0f);  // a partial last group: zeros
    for (int64_t t = t0; t < t1; ++t)
      for (int r = 0; r < kQuantRows; ++r) {
        const int64_t n = t * kQuantRows + r;
        if (n >= w.rows) break;  // padding rows stay zero codes with zero scales
        convert_to_f32(w.dtype, base + n * w.cols * es, row.data(), static_cast<size_t>(w.cols));
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t tg = t * groups + g;
          uint16_t* s = scales + tg * kQuantRows * nscales;
          uint16_t* offset = format == WeightFormat::kInt4 ? s + kQuantRows + r : nullptr;
          if (!quantize_group(format, row.data() + g * kGroup, codes + (tg * kQuantRows + r) * code_bytes, s + r,
                              offset))
            bad.store(true);
        }
      }
  });
  if (bad.load())
    return make_error(ErrorCode::kInvalidArgument, std::string("quantize: a weight is not finite or too large for ") +
                                                       weight_format_name(format) + "'s f16 scales");
  if (const auto fault = g_fault.load(); fault != testing::QuantFault::kNone)
    apply_fault(fault, format, tiles, groups, scales);
  return q;
}

float QuantMatrix::value(int64_t r, int64_t c) const {
  const int64_t groups = (cols_ + kGroup - 1) / kGroup, t = r / kQuantRows, i = r % kQuantRows, g = c / kGroup, j = c % kGroup;
  const int64_t tg = t * groups + g;
  const int64_t code_bytes = detail::quant_code_bytes(format_), nscales = detail::quant_scales(format_);
  const uint8_t* cg = codes() + (tg * kQuantRows + i) * code_bytes;
  const uint16_t* s = scales() + tg * kQuantRows * nscales;
  const float d = f16_to_f32(s[i]);
  if (format_ == WeightFormat::kInt8) return static_cast<float>(static_cast<int8_t>(cg[j])) * d;
  const int q = j < kGroup / 2 ? (cg[j] & 15) : (cg[j - kGroup / 2] >> 4);
  return std::fma(static_cast<float>(q), d, f16_to_f32(s[kQuantRows + i]));
}

}  // namespace chorus::cpu
