// Keys and values of one sequence for every layer of a decoder stack. Per layer, keys and values
// are [capacity, kv_heads, head_dim] f32 rows; rows [0, length) hold positions 0..length−1. The
// buffer grows on demand (doubling, copying) up to max_positions, so short streams stay small.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace chorus::nn {

class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_positions);

  int64_t layers() const { return layers_; }
  int64_t row_width() const { return kv_heads_ * head_dim_; }  // floats per position and layer
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t max_positions() const { return max_positions_; }
  size_t bytes() const;

  // Room for `positions` rows (kResourceExhausted past max_positions). Keeps the content.
  Status reserve(int64_t positions);
  // Forgets rows at and after `length` (a new code-predictor frame starts at 0).
  void truncate(int64_t length);
  // Marks rows [0, length) valid; length <= capacity (the stack calls this after writing them).
  void set_length(int64_t length);

  float* keys(int64_t layer) { return layers_k_[layer].data(); }
  float* values(int64_t layer) { return layers_v_[layer].data(); }
  const float* keys(int64_t layer) const { return layers_k_[layer].data(); }
  const float* values(int64_t layer) const { return layers_v_[layer].data(); }

 private:
  int64_t layers_ = 0, kv_heads_ = 0, head_dim_ = 0, max_positions_ = 0;
  int64_t length_ = 0, capacity_ = 0;
  std::vector<std::vector<float>> layers_k_, layers_v_;
};

}  // namespace chorus::nn
