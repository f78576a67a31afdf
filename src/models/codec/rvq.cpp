#include "models/codec/rvq.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace chorus::codec::detail {

Dequantizer Dequantizer::load(const Weights& w, const DecoderConfig& d) {
  Dequantizer q;
  q.num_quantizers_ = d.num_quantizers;
  q.num_semantic_ = d.num_semantic_quantizers;
  q.codebook_size_ = d.codebook_size;
  q.dim_ = d.codebook_dim / 2;
  q.out_dim_ = d.codebook_dim;
  const Weights quant = w.sub("quantizer.");
  for (int64_t k = 0; k < d.num_quantizers; ++k) {
    const bool first = k < d.num_semantic_quantizers;
    const int64_t idx = first ? k : k - d.num_semantic_quantizers;
    const std::string p = std::string(first ? "rvq_first" : "rvq_rest") + ".vq.layers." +
                          std::to_string(idx) + "._codebook.";
    const Tensor sum = quant.f32(p + "embedding_sum");
    const Tensor usage = quant.f32(p + "cluster_usage");
    std::vector<float> table(static_cast<size_t>(q.codebook_size_ * q.dim_));
    for (int64_t i = 0; i < q.codebook_size_; ++i) {
      const float u = std::max(usage.f32()[i], 1e-5f);
      for (int64_t j = 0; j < q.dim_; ++j) table[i * q.dim_ + j] = sum.f32()[i * q.dim_ + j] / u;
    }
    q.tables_.push_back(std::move(table));
  }
  q.proj_first_ = WeightMatrix::of(quant.raw("rvq_first.output_proj.weight"), q.out_dim_, q.dim_);
  q.proj_rest_ = WeightMatrix::of(quant.raw("rvq_rest.output_proj.weight"), q.out_dim_, q.dim_);
  return q;
}

void Dequantizer::sum_vectors(const int32_t* codes, int64_t n, int64_t first, int64_t last,
                              float* sum) const {
  // Codebooks are added in ascending order, starting from the first one (0 + v is exact).
  for (int64_t t = 0; t < n; ++t) {
    float* s = sum + t * dim_;
    const int32_t* c = codes + t * num_quantizers_;
    std::memcpy(s, tables_[first].data() + c[first] * dim_, sizeof(float) * dim_);
    for (int64_t k = first + 1; k < last; ++k) {
      const float* v = tables_[k].data() + c[k] * dim_;
      for (int64_t j = 0; j < dim_; ++j) s[j] += v[j];
    }
  }
}

void Dequantizer::forward(const int32_t* codes, int64_t n, float* out, Buffer& scratch,
                          ThreadPool* pool) const {
  scratch.resize(static_cast<size_t>(2 * n * dim_ + n * out_dim_));
  float* semantic = scratch.data();
  float* acoustic = semantic + n * dim_;
  float* projected = acoustic + n * dim_;
  sum_vectors(codes, n, 0, num_semantic_, semantic);
  sum_vectors(codes, n, num_semantic_, num_quantizers_, acoustic);
  cpu::linear(semantic, n, proj_first_.ref, nullptr, out, pool);
  cpu::linear(acoustic, n, proj_rest_.ref, nullptr, projected, pool);
  for (int64_t i = 0; i < n * out_dim_; ++i) out[i] += projected[i];
}

}  // namespace chorus::codec::detail
