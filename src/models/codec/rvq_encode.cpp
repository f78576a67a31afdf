#include "models/codec/rvq_encode.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace chorus::codec::detail {

namespace {

// Codebook vectors as the reference computes them: f32 embed_sum / f32 max(usage, 1e-5).
std::vector<float> codebook_table(const Weights& w, const std::string& prefix, int64_t size, int64_t dim) {
  const Tensor sum = w.f32(prefix + "embed_sum");
  const Tensor usage = w.f32(prefix + "cluster_usage");
  std::vector<float> table(static_cast<size_t>(size * dim));
  for (int64_t i = 0; i < size; ++i) {
    const float u = std::max(usage.f32()[i], 1e-5f);
    for (int64_t j = 0; j < dim; ++j) table[i * dim + j] = sum.f32()[i * dim + j] / u;
  }
  return table;
}

}  // namespace

RvqEncoder RvqEncoder::load(const Weights& w, const EncoderConfig& e, int64_t keep) {
  RvqEncoder r;
  r.hidden_ = e.hidden_size;
  r.dim_ = e.codebook_dim;
  r.codebook_size_ = e.codebook_size;
  r.keep_ = keep;
  const Weights q = w.sub("quantizer.");
  auto load_group = [&](const char* name, int64_t count) {
    Group g;
    const std::string p = std::string(name) + ".";
    g.input_proj = WeightMatrix::of(q.raw(p + "input_proj.weight"), r.dim_, r.hidden_);
    for (int64_t i = 0; i < count; ++i) {
      g.tables.push_back(codebook_table(q, p + "layers." + std::to_string(i) + ".codebook.", r.codebook_size_, r.dim_));
      std::vector<float> norms(static_cast<size_t>(r.codebook_size_));
      for (int64_t k = 0; k < r.codebook_size_; ++k) {
        double s = 0;
        for (int64_t j = 0; j < r.dim_; ++j) s += double(g.tables.back()[k * r.dim_ + j]) * g.tables.back()[k * r.dim_ + j];
        norms[k] = static_cast<float>(s);
      }
      g.norms.push_back(std::move(norms));
    }
    return g;
  };
  r.semantic_ = load_group("semantic_residual_vector_quantizer", e.num_semantic_quantizers);
  r.acoustic_ = load_group("acoustic_residual_vector_quantizer", keep - e.num_semantic_quantizers);
  return r;
}

// Nearest codebook vector: a fast f32 pass ranks the vectors by ‖e‖² − 2 r·e (the matrix kernel),
// then every vector within a rounding margin of the best is re-scored exactly as Σ (r − e)² in f64,
// the smallest index winning ties (argmin's rule). So the choice is that of exact arithmetic, not
// of one summation order.
void RvqEncoder::search(const Group& g, float* r, int64_t n, int64_t first, int32_t* codes, ThreadPool* pool) const {
  const int64_t K = codebook_size_, D = dim_;
  std::vector<float> dots(static_cast<size_t>(n * K));
  for (size_t cb = 0; cb < g.tables.size(); ++cb) {
    const float* table = g.tables[cb].data();
    const float* norms = g.norms[cb].data();
    const cpu::MatrixRef m{DType::kF32, table, K, D};
    cpu::linear(r, n, m, nullptr, dots.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      float* x = r + t * D;
      const float* s = dots.data() + t * K;
      double rr = 0;
      for (int64_t j = 0; j < D; ++j) rr += double(x[j]) * x[j];
      float best = INFINITY;
      for (int64_t k = 0; k < K; ++k) best = std::min(best, norms[k] - 2.0f * s[k]);
      // f32 error of ‖e‖² − 2 r·e is far below 1e-4 of the magnitudes involved.
      const float margin = 1e-4f * static_cast<float>(rr + std::fabs(best)) + 1e-30f;
      int64_t pick = -1;
      double pick_d = INFINITY;
      for (int64_t k = 0; k < K; ++k) {
        if (!(norms[k] - 2.0f * s[k] <= best + margin)) continue;
        const float* e = table + k * D;
        double d = 0;
        for (int64_t j = 0; j < D; ++j) {
          const double diff = double(x[j]) - e[j];
          d += diff * diff;
        }
        if (d < pick_d) {
          pick_d = d;
          pick = k;
        }
      }
      if (pick < 0) pick = 0;  // only when the input is not finite (the caller rejects that)
      codes[t * keep_ + first + static_cast<int64_t>(cb)] = static_cast<int32_t>(pick);
      const float* e = table + pick * D;
      for (int64_t j = 0; j < D; ++j) x[j] -= e[j];
    }
  }
}

void RvqEncoder::encode(const float* x, int64_t n, int32_t* codes, ThreadPool* pool) const {
  std::vector<float> r(static_cast<size_t>(n * dim_));
  cpu::linear(x, n, semantic_.input_proj.ref, nullptr, r.data(), pool);
  search(semantic_, r.data(), n, 0, codes, pool);
  cpu::linear(x, n, acoustic_.input_proj.ref, nullptr, r.data(), pool);
  search(acoustic_, r.data(), n, static_cast<int64_t>(semantic_.tables.size()), codes, pool);
}

}  // namespace chorus::codec::detail
