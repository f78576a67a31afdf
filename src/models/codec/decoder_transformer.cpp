#include "models/codec/decoder_transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace chorus::codec::detail {

DecoderTransformer DecoderTransformer::load(const Weights& w, const DecoderConfig& d) {
  DecoderTransformer t;
  t.dims_ = d.transformer;
  t.latent_ = d.latent_dim;
  t.window_ = d.sliding_window;
  const auto& m = t.dims_;
  const int64_t qd = m.heads * m.head_dim, kvd = m.kv_heads * m.head_dim;
  const Weights p = w.sub("pre_transformer.");
  t.input_proj_ = WeightMatrix::of(p.raw("input_proj.weight"), m.hidden, d.latent_dim);
  t.input_bias_ = f32_vector(p, "input_proj.bias");
  t.output_proj_ = WeightMatrix::of(p.raw("output_proj.weight"), d.latent_dim, m.hidden);
  t.output_bias_ = f32_vector(p, "output_proj.bias");
  t.final_norm_ = f32_vector(p, "norm.weight");
  for (int64_t i = 0; i < m.layers; ++i) {
    const Weights l = p.sub("layers." + std::to_string(i) + ".");
    Layer layer;
    layer.input_norm = f32_vector(l, "input_layernorm.weight");
    layer.post_norm = f32_vector(l, "post_attention_layernorm.weight");
    layer.attn_scale = f32_vector(l, "self_attn_layer_scale.scale");
    layer.mlp_scale = f32_vector(l, "mlp_layer_scale.scale");
    layer.q = WeightMatrix::of(l.raw("self_attn.q_proj.weight"), qd, m.hidden);
    layer.k = WeightMatrix::of(l.raw("self_attn.k_proj.weight"), kvd, m.hidden);
    layer.v = WeightMatrix::of(l.raw("self_attn.v_proj.weight"), kvd, m.hidden);
    layer.o = WeightMatrix::of(l.raw("self_attn.o_proj.weight"), m.hidden, qd);
    layer.gate = WeightMatrix::of(l.raw("mlp.gate_proj.weight"), m.intermediate, m.hidden);
    layer.up = WeightMatrix::of(l.raw("mlp.up_proj.weight"), m.intermediate, m.hidden);
    layer.down = WeightMatrix::of(l.raw("mlp.down_proj.weight"), m.hidden, m.intermediate);
    t.layers_.push_back(std::move(layer));
  }
  t.inv_freq_.resize(static_cast<size_t>(m.head_dim / 2));
  cpu::rope_inv_freq(static_cast<float>(m.rope_theta), m.head_dim, t.inv_freq_.data());
  return t;
}

TransformerCache DecoderTransformer::new_cache(int64_t max_rows) const {
  TransformerCache c;
  // W − 1 past rows stay visible to the next call; room for max_rows new ones after them.
  c.capacity = (window_ - 1) + max_rows;
  const size_t kv = static_cast<size_t>(c.capacity * dims_.kv_heads * dims_.head_dim);
  c.layers.resize(static_cast<size_t>(dims_.layers));
  for (auto& l : c.layers) {
    l.k.assign(kv, 0.0f);
    l.v.assign(kv, 0.0f);
  }
  return c;
}

namespace {

// h[i, c] += scale[c] · x[i, c]
void add_scaled(float* h, const float* x, const float* scale, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) h[i * dim + c] += scale[c] * x[i * dim + c];
}

}  // namespace

void DecoderTransformer::layer_forward(const Layer& l, size_t index, std::span<TransformerCache* const> caches,
                                       TransformerCache& c, const int64_t* positions, const Segments& seg,
                                       ThreadPool* pool) const {
  const auto& m = dims_;
  const int64_t H = m.hidden, D = m.head_dim, kvd = m.kv_heads * D, qd = m.heads * D, n = seg.total;
  const float eps = static_cast<float>(m.rms_eps);
  float* h = c.h.data();

  // Row-wise work runs on every stream's rows at once; the caches and attention per stream.
  cpu::rms_norm(h, l.input_norm.data(), c.xn.data(), n, H, eps);
  cpu::linear(c.xn.data(), n, l.q.ref, nullptr, c.q.data(), pool);
  cpu::linear(c.xn.data(), n, l.k.ref, nullptr, c.k.data(), pool);
  cpu::linear(c.xn.data(), n, l.v.ref, nullptr, c.v.data(), pool);
  cpu::rope(c.q.data(), n, m.heads, D, positions, inv_freq_.data());
  cpu::rope(c.k.data(), n, m.kv_heads, D, positions, inv_freq_.data());

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  for (size_t i = 0; i < caches.size(); ++i) {
    TransformerCache& own = *caches[i];
    TransformerCache::Layer& kv = own.layers[index];
    const int64_t r0 = seg.at[i], rn = seg.n[i];
    // Make room: keep only the W − 1 most recent rows when the new ones would not fit.
    if (kv.rows + rn > own.capacity) {
      const int64_t keep = std::min(kv.rows, window_ - 1), drop = kv.rows - keep;
      std::memmove(kv.k.data(), kv.k.data() + drop * kvd, sizeof(float) * keep * kvd);
      std::memmove(kv.v.data(), kv.v.data() + drop * kvd, sizeof(float) * keep * kvd);
      kv.base += drop;
      kv.rows = keep;
    }
    std::memcpy(kv.k.data() + kv.rows * kvd, c.k.data() + r0 * kvd, sizeof(float) * rn * kvd);
    std::memcpy(kv.v.data() + kv.rows * kvd, c.v.data() + r0 * kvd, sizeof(float) * rn * kvd);
    kv.rows += rn;
    cpu::attention(c.q.data() + r0 * qd, rn, m.heads, kv.k.data(), kv.v.data(), kv.rows, m.kv_heads, D,
                   positions[r0] - kv.base, window_, scale, c.attn.data() + r0 * qd, pool);
  }
  cpu::linear(c.attn.data(), n, l.o.ref, nullptr, c.proj.data(), pool);
  add_scaled(h, c.proj.data(), l.attn_scale.data(), n, H);

  cpu::rms_norm(h, l.post_norm.data(), c.xn.data(), n, H, eps);
  cpu::linear(c.xn.data(), n, l.gate.ref, nullptr, c.gate.data(), pool);
  cpu::linear(c.xn.data(), n, l.up.ref, nullptr, c.up.data(), pool);
  cpu::silu_mul(c.gate.data(), c.up.data(), c.gate.data(), n * m.intermediate);
  cpu::linear(c.gate.data(), n, l.down.ref, nullptr, c.proj.data(), pool);
  add_scaled(h, c.proj.data(), l.mlp_scale.data(), n, H);
}

void DecoderTransformer::forward(TransformerCache& c, const float* x, int64_t n, float* y,
                                 ThreadPool* pool) const {
  TransformerCache* caches[] = {&c};
  const int64_t counts[] = {n};
  forward_batch(caches, x, Segments::of(counts), y, c, pool);
}

void DecoderTransformer::forward_batch(std::span<TransformerCache* const> caches, const float* x,
                                       const Segments& seg, float* y, TransformerCache& c, ThreadPool* pool) const {
  const auto& m = dims_;
  const int64_t qd = m.heads * m.head_dim, kvd = m.kv_heads * m.head_dim, n = seg.total;
  auto size = [n](Buffer& b, int64_t width) { b.resize(static_cast<size_t>(n * width)); };
  size(c.h, m.hidden);
  size(c.xn, m.hidden);
  size(c.q, qd);
  size(c.k, kvd);
  size(c.v, kvd);
  size(c.attn, qd);
  size(c.proj, std::max(m.hidden, latent_));
  size(c.gate, m.intermediate);
  size(c.up, m.intermediate);

  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (size_t i = 0; i < caches.size(); ++i)
    for (int64_t t = 0; t < seg.n[i]; ++t) positions[seg.at[i] + t] = caches[i]->next_pos + t;

  cpu::linear(x, n, input_proj_.ref, input_bias_.data(), c.h.data(), pool);
  for (size_t i = 0; i < layers_.size(); ++i) layer_forward(layers_[i], i, caches, c, positions.data(), seg, pool);
  cpu::rms_norm(c.h.data(), final_norm_.data(), c.xn.data(), n, m.hidden, static_cast<float>(m.rms_eps));
  cpu::linear(c.xn.data(), n, output_proj_.ref, output_bias_.data(), y, pool);
  for (size_t i = 0; i < caches.size(); ++i) caches[i]->next_pos += seg.n[i];
}

}  // namespace chorus::codec::detail
