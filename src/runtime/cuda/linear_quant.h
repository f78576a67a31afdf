// Internal to cuda::linear (linear.cu): its parts for quantised matrices (linear_quant.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "runtime/cuda/ops.h"

namespace chorus::cuda::detail {

// Whether linear takes `a` with quantised matrices: every output in one quantised format with codes
// and scales, cols a multiple of 16, x (and the norm weights) 16-byte aligned, ldx a multiple of 4.
// Empty when it does; otherwise what is wrong.
const char* quant_args_problem(const LinearArgs& a);

// The matrix-vector path (up to kGemvMaxRows rows) for `a`, already checked by linear.
Status gemv_quant(const LinearArgs& a, cudaStream_t s);

// hi, lo [rows, cols] bf16 ← w (quantised) split as hi = bf16(w), lo = bf16(w − hi), for the
// tensor-core path. Waits for the kernels before it (PDL) before writing.
Status dequantize_split(const DeviceMatrix& w, uint16_t* hi, uint16_t* lo, cudaStream_t s);

}  // namespace chorus::cuda::detail
