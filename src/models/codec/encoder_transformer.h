// The speech encoder's transformer (transformers' MimiTransformerModel, qwen3_tts.md §4.3) over the
// 25 Hz SEANet frames: pre-norm layers with LayerNorm (weight and bias), causal sliding-window
// attention (a query sees itself and the window − 1 positions before it) with rotate-half RoPE,
// an exact-GELU MLP without biases, layer-scaled residuals, and no final norm. Time-major [T, C].
// The whole sequence is processed in one pass (reference audio is short: 25 rows per second).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

class EncoderTransformer {
 public:
  static EncoderTransformer load(const Weights& w, const EncoderConfig& e);

  int64_t hidden() const { return hidden_; }
  // x [T, hidden] -> y [T, hidden] (y may alias x), positions 0..T−1.
  void forward(const float* x, int64_t T, float* y, ThreadPool* pool) const;

 private:
  struct Layer {
    std::vector<float> norm1_w, norm1_b, norm2_w, norm2_b, attn_scale, mlp_scale;
    WeightMatrix q, k, v, o, fc1, fc2;
  };

  int64_t hidden_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, intermediate_ = 0, window_ = 0;
  float eps_ = 1e-5f;
  std::vector<float> inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace chorus::codec::detail
