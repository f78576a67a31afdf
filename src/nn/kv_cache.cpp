#include "nn/kv_cache.h"

#include <algorithm>
#include <new>
#include <string>

namespace chorus::nn {

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_positions)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), max_positions_(max_positions),
      layers_k_(static_cast<size_t>(layers)), layers_v_(static_cast<size_t>(layers)) {}

size_t KvCache::bytes() const {
  return static_cast<size_t>(2 * layers_ * capacity_ * row_width()) * sizeof(float);
}

Status KvCache::reserve(int64_t positions) {
  if (positions <= capacity_) return ok_status();
  if (positions > max_positions_)
    return make_error(ErrorCode::kResourceExhausted,
                      "sequence of " + std::to_string(positions) + " positions exceeds the model's limit of " +
                          std::to_string(max_positions_));
  const int64_t cap = std::min(max_positions_, std::max({positions, 2 * capacity_, int64_t{16}}));
  const size_t n = static_cast<size_t>(cap * row_width());
  try {
    for (int64_t l = 0; l < layers_; ++l) {
      layers_k_[l].resize(n);  // keeps rows [0, capacity): the layout is row-major by position
      layers_v_[l].resize(n);
    }
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, "out of memory growing a KV cache to " + std::to_string(cap) + " positions");
  }
  capacity_ = cap;
  return ok_status();
}

void KvCache::truncate(int64_t length) { length_ = std::clamp<int64_t>(length, 0, length_); }

void KvCache::set_length(int64_t length) { length_ = std::clamp<int64_t>(length, 0, capacity_); }

}  // namespace chorus::nn
