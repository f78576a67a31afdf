#include "models/breeze_tts/weights.h"

#include "nn/qwen3_weights.h"

namespace chorus::breeze_tts {

void declare_text_encoder_weights(const Config& c, WeightTable& t) {
  const auto& te = c.text_encoder;
  const int64_t H = te.hidden, q = te.heads * te.head_dim, kv = te.kv_heads * te.head_dim;
  const std::string p = kTextEncoderPrefix;
  // kLinear on [vocab, H] draws N(0, 1/H): rows of unit norm once scaled by sqrt(H), as upstream.
  t.add(p + "embed_tokens.weight", {c.text_vocab, H});
  t.add(p + "embed_tokens.eoi_embedding", {H}, WeightInit::kEmbedding).optional = te.eoi_token_id < 0;
  // T5Gemma2 norms are stored zero-centred and used as (1 + w): small values around 0 (kBias).
  for (int64_t i = 0; i < te.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    t.add(l + "pre_self_attn_layernorm.weight", {H}, WeightInit::kBias);
    t.add(l + "self_attn.q_proj.weight", {q, H});
    t.add(l + "self_attn.k_proj.weight", {kv, H});
    t.add(l + "self_attn.v_proj.weight", {kv, H});
    t.add(l + "self_attn.o_proj.weight", {H, q});
    t.add(l + "self_attn.q_norm.weight", {te.head_dim}, WeightInit::kBias);
    t.add(l + "self_attn.k_norm.weight", {te.head_dim}, WeightInit::kBias);
    t.add(l + "post_self_attn_layernorm.weight", {H}, WeightInit::kBias);
    t.add(l + "pre_feedforward_layernorm.weight", {H}, WeightInit::kBias);
    t.add(l + "mlp.gate_proj.weight", {te.intermediate, H});
    t.add(l + "mlp.up_proj.weight", {te.intermediate, H});
    t.add(l + "mlp.down_proj.weight", {H, te.intermediate});
    t.add(l + "post_feedforward_layernorm.weight", {H}, WeightInit::kBias);
  }
  t.add(p + "norm.weight", {H}, WeightInit::kBias);
  t.add(kTextProjection, {c.hidden, H});
}

void declare_backbone_weights(const Config& c, WeightTable& t) {
  nn::declare_qwen3_stack(t, kBackbonePrefix, c.backbone.dims, /*qk_norm=*/true);
  t.add(kLmHead, {c.lm_head_rows(), c.hidden});
  // MLX conversions materialise the tied table; the release omits it.
  t.add("backbone_model.embed_tokens.embed_audio_tokens.weight", {c.num_codebooks * c.audio_vocab, c.audio_embed},
        WeightInit::kEmbedding)
      .optional = true;
}

void declare_depth_weights(const Config& c, WeightTable& t) {
  const auto& d = c.depth;
  t.add(kAudioTable, {c.num_codebooks * c.audio_vocab, c.audio_embed}, WeightInit::kEmbedding);
  t.add(kDepthProjector, {d.dims.hidden, c.audio_embed});
  nn::declare_qwen3_stack(t, kDepthPrefix, d.dims, /*qk_norm=*/false);
  // One head per predicted codebook (1..num_codebooks-1), stored [head, in, out].
  t.add(kCodebooksHead, {c.num_codebooks - 1, d.dims.hidden, c.audio_vocab});
}

WeightTable main_weight_table(const Config& c) {
  WeightTable t;
  declare_text_encoder_weights(c, t);
  declare_backbone_weights(c, t);
  declare_depth_weights(c, t);
  t.add("embed_text_tokens.weight", {c.text_vocab, c.hidden}, WeightInit::kEmbedding).optional = true;  // dead
  return t;
}

}  // namespace chorus::breeze_tts
