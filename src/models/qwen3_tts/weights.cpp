#include "models/qwen3_tts/weights.h"

#include "nn/qwen3_weights.h"

namespace chorus::qwen3_tts {

void declare_talker_weights(const Config& c, WeightTable& t) {
  const auto& tk = c.talker;
  const int64_t H = tk.dims.hidden;
  t.add("talker.model.codec_embedding.weight", {tk.codec_vocab, H}, WeightInit::kEmbedding);
  t.add("talker.model.text_embedding.weight", {tk.text_vocab, tk.text_hidden}, WeightInit::kEmbedding);
  nn::declare_qwen3_stack(t, "talker.model.", tk.dims);
  t.add("talker.text_projection.linear_fc1.weight", {tk.text_hidden, tk.text_hidden});
  t.add("talker.text_projection.linear_fc1.bias", {tk.text_hidden}, WeightInit::kBias);
  t.add("talker.text_projection.linear_fc2.weight", {H, tk.text_hidden});
  t.add("talker.text_projection.linear_fc2.bias", {H}, WeightInit::kBias);
  t.add("talker.codec_head.weight", {tk.codec_vocab, H});
}

void declare_code_predictor_weights(const Config& c, WeightTable& t) {
  const auto& cp = c.code_predictor;
  const int64_t H = c.talker.dims.hidden, C = cp.dims.hidden;
  const std::string p = "talker.code_predictor.";
  for (int64_t k = 0; k + 1 < cp.num_code_groups; ++k) {
    // Embedding rows live in talker space (H wide): the frame embedding sums them with the talker's.
    t.add(p + "model.codec_embedding." + std::to_string(k) + ".weight", {cp.vocab, H}, WeightInit::kEmbedding);
    t.add(p + "lm_head." + std::to_string(k) + ".weight", {cp.vocab, C});
  }
  nn::declare_qwen3_stack(t, p + "model.", cp.dims);
  if (H != C) {  // 1.7B: talker width 2048 -> predictor width 1024
    t.add(p + "small_to_mtp_projection.weight", {C, H});
    t.add(p + "small_to_mtp_projection.bias", {C}, WeightInit::kBias);
  }
}

void declare_speaker_encoder_weights(const Config& c, WeightTable& t) {
  if (!c.speaker_encoder) return;
  const auto& s = *c.speaker_encoder;
  const std::string p = "speaker_encoder.";
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    t.add(p + name + ".weight", {out, in, k});
    t.add(p + name + ".bias", {out}, WeightInit::kBias);
  };
  conv("blocks.0.conv", s.channels[0], s.mel_dim, s.kernel_sizes[0]);
  for (int i = 1; i <= 3; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const int64_t C = s.channels[i], prev = s.channels[i - 1], g = C / s.res2net_scale;
    conv(b + "tdnn1.conv", C, prev, 1);
    for (int64_t j = 0; j + 1 < s.res2net_scale; ++j)
      conv(b + "res2net_block.blocks." + std::to_string(j) + ".conv", g, g, s.kernel_sizes[i]);
    conv(b + "tdnn2.conv", C, C, 1);
    conv(b + "se_block.conv1", s.se_channels, C, 1);
    conv(b + "se_block.conv2", C, s.se_channels, 1);
  }
  const int64_t mfa_in = s.channels[1] + s.channels[2] + s.channels[3];
  conv("mfa.conv", s.channels[4], mfa_in, s.kernel_sizes[4]);
  conv("asp.tdnn.conv", s.attention_channels, s.channels[4] * 3, 1);
  conv("asp.conv", s.channels[4], s.attention_channels, 1);
  conv("fc", s.enc_dim, s.channels[4] * 2, 1);
}

WeightTable main_weight_table(const Config& c) {
  WeightTable t;
  declare_talker_weights(c, t);
  declare_code_predictor_weights(c, t);
  declare_speaker_encoder_weights(c, t);
  return t;
}

}  // namespace chorus::qwen3_tts
