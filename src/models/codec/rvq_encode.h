// Split residual vector quantisation, encode direction (transformers'
// MimiSplitResidualVectorQuantizer.encode, qwen3_tts.md §4.3): the semantic quantizer and the
// acoustic quantizer each project the same 12.5 Hz frame with their own 1×1 input conv, then pick,
// codebook after codebook, the nearest vector (L2) to what is left and subtract it. Codebook
// vectors are embed_sum / max(cluster_usage, 1e-5).
//
// Only the first `keep` codebooks are computed (1 semantic + keep − 1 acoustic): a residual
// quantizer's first codes never depend on its later codebooks.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

class RvqEncoder {
 public:
  // keep: codebooks to produce, in (num_semantic_quantizers, num_quantizers].
  static RvqEncoder load(const Weights& w, const EncoderConfig& e, int64_t keep);

  int64_t keep() const { return keep_; }
  // x [n, hidden] -> codes [n, keep()] (row-major).
  void encode(const float* x, int64_t n, int32_t* codes, ThreadPool* pool) const;

 private:
  struct Group {
    WeightMatrix input_proj;                  // [dim, hidden]
    std::vector<std::vector<float>> tables;   // one [codebook_size, dim] table per codebook used
    std::vector<std::vector<float>> norms;    // ‖vector‖² per codebook row (f64 search, see .cpp)
  };
  // Residual search of one group over rows of projected input r [n, dim] (modified in place);
  // writes codes[t·keep + first + j].
  void search(const Group& g, float* r, int64_t n, int64_t first, int32_t* codes, ThreadPool* pool) const;

  Group semantic_, acoustic_;
  int64_t hidden_ = 0, dim_ = 0, codebook_size_ = 0, keep_ = 0;
};

}  // namespace chorus::codec::detail
