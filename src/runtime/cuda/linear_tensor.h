// Internal to cuda::linear (linear.cu): the tensor-core kernel for bf16 matrices (linear_tensor.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace chorus::cuda::detail {

// K is summed in chunks of this many k, each chunk's value added to the total in order; part of
// what an output is (linear_tensor.cu), so fixed.
inline constexpr int64_t kTensorChunk = 256;
// Launches of at most this many rows may spread a matrix's chunks over blocks.
inline constexpr int64_t kTensorSplitRows = 64;
// The most rows a launch with three-part inputs (TensorLinearArgs::xlo2) may have: one row tile.
inline constexpr int64_t kTensorThreePartRows = 8;

// One output matrix of a call (also linear.cu's matrix-vector and cuBLAS paths').
struct TensorSeg {
  const uint16_t* w;  // [n, K] bf16
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t n;
};

struct TensorLinearArgs {
  const uint16_t* xhi = nullptr;  // [M, K] bf16: the (normed) inputs' high parts
  const uint16_t* xlo = nullptr;  // [M, K] bf16: their low parts
  // [M, K] bf16: third parts (x − hi − lo), or null. With them a launch of up to
  // kTensorThreePartRows rows keeps the inputs to f32 precision, as accurate as the matrix-vector
  // kernels it stands in for; not with lo_zero.
  const uint16_t* xlo2 = nullptr;
  bool lo_zero = false;           // the low parts are all zero (bf16-activation mode): not read
  int64_t M = 0, K = 0;           // K a multiple of 8, rows of w and x 16-byte aligned
  TensorSeg seg[3] = {};
  int nseg = 1;
  int64_t features = 0;  // outputs per row (SwiGLU: the gate's rows)
  int epi = 0;           // 0 store, 1 add to y, 2 SwiGLU of seg[0] (gate) and seg[1] (up) into seg[0].y
  bool bf16 = false;
  bool round_out = true;
  float* partial = nullptr;  // scratch for chunks spread over blocks (may be null: not spread)
};

// Floats of `partial` that let every launch of up to max_rows rows spread its chunks.
int64_t tensor_linear_partial_floats(int64_t max_rows, int64_t max_k, int64_t max_n_total);

// y ← the epilogue of W · (hi + lo [+ lo2]) for every row; waits for the kernel before it (PDL) first.
cudaError_t tensor_linear(const TensorLinearArgs& p, int64_t partial_floats, cudaStream_t s);

}  // namespace chorus::cuda::detail
