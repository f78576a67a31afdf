// The decoder's pre-transformer (qwen3_tts.md §4.1 step 3): input_proj, pre-norm layers with
// layer-scaled residuals, causal sliding-window attention (window W = 72 keys including the query
// itself) with plain RoPE, SwiGLU MLP, final RMSNorm, output_proj. Time-major [T, C] data.
//
// Streaming: each layer keeps the keys and values of its last W − 1 positions (a bounded buffer
// that is compacted when full, so the kernels see contiguous rows) and positions continue across
// calls. Attention scores depend only on which keys are visible, so any split of the sequence
// gives bitwise the output of one pass; there is no cap on the sequence length.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

struct TransformerCache {
  struct Layer {
    Buffer k, v;       // [capacity, kv_heads·head_dim], rows are consecutive positions
    int64_t base = 0;  // position of row 0
    int64_t rows = 0;
  };
  std::vector<Layer> layers;
  int64_t capacity = 0;  // rows per layer
  int64_t next_pos = 0;  // position of the next input row
  Buffer h, xn, q, k, v, attn, proj, gate, up;  // activations of one call (reused)
};

class DecoderTransformer {
 public:
  static DecoderTransformer load(const Weights& w, const DecoderConfig& d);

  // max_rows: the most rows one forward() call may pass.
  TransformerCache new_cache(int64_t max_rows) const;
  // x [n, latent] -> y [n, latent], n <= the cache's max_rows.
  void forward(TransformerCache& cache, const float* x, int64_t n, float* y, ThreadPool* pool) const;
  // The same for several streams: x [N, latent] holds stream i's rows at [seg.at[i], + seg.n[i])
  // (conv_layers.h's Segments), caches[i] its keys, values and positions; `work` lends the
  // activation buffers (any cache; the streams' own caches' are not used).
  void forward_batch(std::span<TransformerCache* const> caches, const float* x, const Segments& seg, float* y,
                     TransformerCache& work, ThreadPool* pool) const;

 private:
  struct Layer {
    std::vector<float> input_norm, post_norm, attn_scale, mlp_scale;
    WeightMatrix q, k, v, o, gate, up, down;
  };
  void layer_forward(const Layer& l, size_t index, std::span<TransformerCache* const> caches, TransformerCache& c,
                     const int64_t* positions, const Segments& seg, ThreadPool* pool) const;

  nn::Qwen3Dims dims_;
  int64_t latent_ = 0, window_ = 0;
  WeightMatrix input_proj_, output_proj_;
  std::vector<float> input_bias_, output_bias_, final_norm_, inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace chorus::codec::detail
