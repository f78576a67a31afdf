#include "nn/qwen3_weights.h"

namespace chorus::nn {

void declare_qwen3_layer(WeightTable& t, const std::string& p, const Qwen3Dims& d, bool qk_norm) {
  const int64_t H = d.hidden, q = d.heads * d.head_dim, kv = d.kv_heads * d.head_dim;
  t.add(p + "input_layernorm.weight", {H}, WeightInit::kNormWeight);
  t.add(p + "self_attn.q_proj.weight", {q, H});
  t.add(p + "self_attn.k_proj.weight", {kv, H});
  t.add(p + "self_attn.v_proj.weight", {kv, H});
  t.add(p + "self_attn.o_proj.weight", {H, q});
  if (qk_norm) {
    t.add(p + "self_attn.q_norm.weight", {d.head_dim}, WeightInit::kNormWeight);
    t.add(p + "self_attn.k_norm.weight", {d.head_dim}, WeightInit::kNormWeight);
  }
  t.add(p + "post_attention_layernorm.weight", {H}, WeightInit::kNormWeight);
  t.add(p + "mlp.gate_proj.weight", {d.intermediate, H});
  t.add(p + "mlp.up_proj.weight", {d.intermediate, H});
  t.add(p + "mlp.down_proj.weight", {H, d.intermediate});
}

void declare_qwen3_stack(WeightTable& t, const std::string& p, const Qwen3Dims& d, bool qk_norm) {
  for (int64_t i = 0; i < d.layers; ++i) declare_qwen3_layer(t, p + "layers." + std::to_string(i) + ".", d, qk_norm);
  t.add(p + "norm.weight", {d.hidden}, WeightInit::kNormWeight);
}

}  // namespace chorus::nn
