// De-quantisation of the split residual vector quantiser: frame t's codes pick one vector per
// codebook; the semantic group (the first num_semantic_quantizers codebooks) and the acoustic rest
// are summed separately, each projected by its 1×1 output conv (no bias), and the two added
// (qwen3_tts.md §4.1 step 1). Codebook vectors are embedding_sum / max(cluster_usage, 1e-5).
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

class Dequantizer {
 public:
  static Dequantizer load(const Weights& w, const DecoderConfig& d);

  int64_t num_quantizers() const { return num_quantizers_; }
  int64_t codebook_size() const { return codebook_size_; }
  int64_t out_dim() const { return out_dim_; }
  // codes [n, num_quantizers] (checked by the caller to lie in [0, codebook_size)) -> out [n, out_dim].
  void forward(const int32_t* codes, int64_t n, float* out, Buffer& scratch, ThreadPool* pool) const;

 private:
  // Sum of the codebook vectors of codebooks [first, last) for every frame -> sum [n, dim_].
  void sum_vectors(const int32_t* codes, int64_t n, int64_t first, int64_t last, float* sum) const;

  std::vector<std::vector<float>> tables_;  // one [codebook_size, dim_] table per codebook
  WeightMatrix proj_first_, proj_rest_;     // [out_dim, dim_]
  int64_t num_quantizers_ = 0, num_semantic_ = 1, codebook_size_ = 0, dim_ = 0, out_dim_ = 0;
};

}  // namespace chorus::codec::detail
