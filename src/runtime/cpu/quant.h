// Weight-only quantisation of linear layers, done at load from the checkpoint's bf16/f32 weights.
//
//   int8: symmetric, one f16 scale per row and group of 32 columns: w = q·d, q in [−127, 127],
//         d = max|w| / 127 (8.5 bits per weight).
//   int4: asymmetric, f16 scale and offset per row and group of 32: w = q·d + m, q in [0, 15],
//         m = min w, d = (max w − min w) / 15 (5 bits per weight).
//
// Codes are computed against the f16-rounded scales, so the stored scales are the ones the rounding
// was chosen for. The kernels dequantise in registers and accumulate in f32 on f32 activations, so
// the only error against the bf16 model is the weights' rounding — except int4 on AVX-512 VNNI,
// whose integer products take the activations rounded to int8 per group of 32 (the weights' error
// dominates; both measured in docs/quantization.md). Rows are stored in tiles of 4, each tile's
// groups contiguous, so a matrix-vector product reads one sequential stream.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::cpu {

struct MatrixRef;

const char* weight_format_name(WeightFormat f);  // "bf16", "int8", "int4", "fp8"
std::optional<WeightFormat> weight_format_from_name(std::string_view name);

class QuantMatrix {
 public:
  static constexpr int64_t kGroup = 32;  // columns per scale (a partial last group is zero-padded)

  // kInvalidArgument for a float-as-stored format, an empty or non-float matrix, and weights that
  // are not finite or whose scale does not fit f16; kUnsupported for fp8 (CUDA only, row_quant.h).
  static Result<QuantMatrix> quantize(const MatrixRef& w, WeightFormat format, ThreadPool* pool = nullptr);

  WeightFormat format() const { return format_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t groups() const { return (cols_ + kGroup - 1) / kGroup; }
  bool empty() const { return rows_ == 0; }
  size_t bytes() const { return codes_ ? codes_->size() + scales_->size() : 0; }  // memory held
  // The dequantised element (r, c): exactly the value the kernels multiply by.
  float value(int64_t r, int64_t c) const;

  const uint8_t* codes() const { return static_cast<const uint8_t*>(codes_->data()); }
  const uint16_t* scales() const { return static_cast<const uint16_t*>(scales_->data()); }

 private:
  WeightFormat format_ = WeightFormat::kBf16;
  int64_t rows_ = 0, cols_ = 0;
  // Immutable after quantize(); copies share them, as Tensor copies share their memory.
  std::shared_ptr<AlignedBuffer> codes_, scales_;
};

// y[M, N] = x[M, K] · wᵀ (+ bias[N]); the same contract as the float linear (kernels.h): each
// element's reduction order is fixed, so a row's result is the same for any M and thread count.
void linear(const float* x, int64_t M, const QuantMatrix& w, const float* bias, float* y,
            ThreadPool* pool = nullptr);

// A linear layer's weight [out, in] as a model keeps it: the checkpoint tensor as stored (f32,
// bf16 or f16), or quantised at load.
class LinearWeight {
 public:
  LinearWeight() = default;
  // kBf16 keeps `t` (rank 2) as it is; int8 / int4 quantise it and drop it.
  static Result<LinearWeight> load(Tensor t, WeightFormat format, ThreadPool* pool = nullptr);

  bool empty() const { return rows_ == 0; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  WeightFormat format() const { return quant_.empty() ? WeightFormat::kBf16 : quant_.format(); }
  size_t bytes() const { return quant_.empty() ? tensor_.nbytes() : quant_.bytes(); }
  const Tensor& tensor() const { return tensor_; }     // as stored; empty when quantised
  const QuantMatrix& quant() const { return quant_; }  // empty when as stored

 private:
  int64_t rows_ = 0, cols_ = 0;
  Tensor tensor_;
  QuantMatrix quant_;
};

void linear(const float* x, int64_t M, const LinearWeight& w, const float* bias, float* y,
            ThreadPool* pool = nullptr);

// Several products of the same x[M, K] in one parallel pass, y_i = x · w_iᵀ, each output exactly
// as linear() computes it. One hand-off to the threads instead of one per product: a decode step
// makes hundreds of small products (q, k and v of a layer share x, as do gate and up).
struct LinearOutput {
  const LinearWeight* w;
  float* y;
};
void linear_fused(const float* x, int64_t M, std::span<const LinearOutput> outs, ThreadPool* pool = nullptr);

// Test-only: deliberate quantiser mistakes, so tests can prove their quality bounds catch them.
// While set (process-wide), quantize() applies the mistake to every matrix it makes.
namespace testing {
enum class QuantFault {
  kNone,
  kScaleOffByOneGroup,  // each group is dequantised with the scale (and offset) of the next group
  kScaleTooLarge,       // every scale is 1/0.9 of the right one (f16-rounded)
};
void plant_quant_fault(QuantFault f);
}  // namespace testing

}  // namespace chorus::cpu
