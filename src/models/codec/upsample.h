// Latent-rate upsampling (qwen3_tts.md §4.1 step 4): per ratio r, a causal transposed conv
// (kernel = stride = r) then a ConvNeXt block: causal depthwise conv k7, LayerNorm over channels
// (eps 1e-6), Linear C -> 4C, exact GELU, Linear 4C -> C, × gamma, residual add.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

struct UpsampleState {
  TransposeHistory up;
  Buffer dw_hist;
};

struct UpsampleScratch {
  Buffer a, b, rows, wide;
  SegmentScratch segments;
};

class UpsampleStage {
 public:
  // Tensors under `w` ("upsample.{i}."): 0.conv, 1.dwconv.conv, 1.norm, 1.pwconv1/2, 1.gamma.
  static UpsampleStage load(const Weights& w, int64_t channels, int64_t ratio);

  int64_t ratio() const { return up_.stride; }
  UpsampleState new_state() const { return {up_.initial_history(), dwconv_.initial_history()}; }
  // x [C, n] -> upsampled [C, n·r] (after the transposed conv) and y [C, n·r] (after ConvNeXt).
  void forward(UpsampleState& s, const float* x, int64_t n, float* upsampled, float* y,
               UpsampleScratch& scratch, ThreadPool* pool) const;
  // The same for the streams of `seg` (x [C, N], conv_layers.h's Segments), states[i] stream i's.
  void forward_batch(std::span<UpsampleState* const> states, const float* x, const Segments& seg, float* upsampled,
                     float* y, UpsampleScratch& scratch, ThreadPool* pool) const;

 private:
  CausalConvTranspose1d up_;
  CausalConv1d dwconv_;
  std::vector<float> norm_w_, norm_b_, pw1_b_, pw2_b_, gamma_;
  WeightMatrix pw1_, pw2_;
  int64_t channels_ = 0;
};

}  // namespace chorus::codec::detail
