#include "models/codec/encoder_transformer.h"

#include <cmath>
#include <cstring>
#include <string>

namespace chorus::codec::detail {

EncoderTransformer EncoderTransformer::load(const Weights& w, const EncoderConfig& e) {
  EncoderTransformer t;
  t.hidden_ = e.hidden_size;
  t.heads_ = e.num_attention_heads;
  t.kv_heads_ = e.num_key_value_heads;
  t.head_dim_ = e.head_dim;
  t.intermediate_ = e.intermediate_size;
  t.window_ = e.sliding_window;
  t.eps_ = static_cast<float>(e.norm_eps);
  const int64_t H = t.hidden_, qd = t.heads_ * t.head_dim_, kvd = t.kv_heads_ * t.head_dim_;
  for (int64_t i = 0; i < e.num_hidden_layers; ++i) {
    const Weights l = w.sub("encoder_transformer.layers." + std::to_string(i) + ".");
    Layer layer;
    layer.norm1_w = f32_vector(l, "input_layernorm.weight");
    layer.norm1_b = f32_vector(l, "input_layernorm.bias");
    layer.norm2_w = f32_vector(l, "post_attention_layernorm.weight");
    layer.norm2_b = f32_vector(l, "post_attention_layernorm.bias");
    layer.attn_scale = f32_vector(l, "self_attn_layer_scale.scale");
    layer.mlp_scale = f32_vector(l, "mlp_layer_scale.scale");
    layer.q = WeightMatrix::of(l.raw("self_attn.q_proj.weight"), qd, H);
    layer.k = WeightMatrix::of(l.raw("self_attn.k_proj.weight"), kvd, H);
    layer.v = WeightMatrix::of(l.raw("self_attn.v_proj.weight"), kvd, H);
    layer.o = WeightMatrix::of(l.raw("self_attn.o_proj.weight"), H, qd);
    layer.fc1 = WeightMatrix::of(l.raw("mlp.fc1.weight"), t.intermediate_, H);
    layer.fc2 = WeightMatrix::of(l.raw("mlp.fc2.weight"), H, t.intermediate_);
    t.layers_.push_back(std::move(layer));
  }
  t.inv_freq_.resize(static_cast<size_t>(t.head_dim_ / 2));
  cpu::rope_inv_freq(static_cast<float>(e.rope_theta), t.head_dim_, t.inv_freq_.data());
  return t;
}

void EncoderTransformer::forward(const float* x, int64_t T, float* y, ThreadPool* pool) const {
  const int64_t H = hidden_, D = head_dim_, qd = heads_ * D, kvd = kv_heads_ * D;
  auto buf = [T](int64_t width) { return std::vector<float>(static_cast<size_t>(T * width)); };
  std::vector<float> h(x, x + T * H), xn = buf(H), q = buf(qd), k = buf(kvd), v = buf(kvd),
                                      attn = buf(qd), proj = buf(H), mid = buf(intermediate_);
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) positions[i] = i;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto add_scaled = [&](const std::vector<float>& s) {
    for (int64_t i = 0; i < T; ++i)
      for (int64_t c = 0; c < H; ++c) h[i * H + c] += s[c] * proj[i * H + c];
  };
  for (const Layer& l : layers_) {
    cpu::layer_norm(h.data(), l.norm1_w.data(), l.norm1_b.data(), xn.data(), T, H, eps_);
    cpu::linear(xn.data(), T, l.q.ref, nullptr, q.data(), pool);
    cpu::linear(xn.data(), T, l.k.ref, nullptr, k.data(), pool);
    cpu::linear(xn.data(), T, l.v.ref, nullptr, v.data(), pool);
    cpu::rope(q.data(), T, heads_, D, positions.data(), inv_freq_.data());
    cpu::rope(k.data(), T, kv_heads_, D, positions.data(), inv_freq_.data());
    cpu::attention(q.data(), T, heads_, k.data(), v.data(), T, kv_heads_, D, 0, window_, scale, attn.data(), pool);
    cpu::linear(attn.data(), T, l.o.ref, nullptr, proj.data(), pool);
    add_scaled(l.attn_scale);

    cpu::layer_norm(h.data(), l.norm2_w.data(), l.norm2_b.data(), xn.data(), T, H, eps_);
    cpu::linear(xn.data(), T, l.fc1.ref, nullptr, mid.data(), pool);
    cpu::gelu_erf(mid.data(), T * intermediate_);
    cpu::linear(mid.data(), T, l.fc2.ref, nullptr, proj.data(), pool);
    add_scaled(l.mlp_scale);
  }
  std::memcpy(y, h.data(), sizeof(float) * T * H);
}

}  // namespace chorus::codec::detail
