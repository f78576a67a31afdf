#include "models/codec/weights.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "io/json_util.h"
#include "models/random_weights.h"

namespace chorus::codec {

namespace {

void conv(WeightTable& t, const std::string& name, int64_t out, int64_t in, int64_t k, bool bias = true) {
  t.add(name + ".weight", {out, in, k});
  if (bias) t.add(name + ".bias", {out}, WeightInit::kBias);
}

// ConvTranspose1d weights are [in, out, k].
void conv_t(WeightTable& t, const std::string& name, int64_t in, int64_t out, int64_t k) {
  t.add(name + ".weight", {in, out, k});
  t.add(name + ".bias", {out}, WeightInit::kBias);
}

void snake(WeightTable& t, const std::string& name, int64_t ch) {
  t.add(name + ".alpha", {ch}, WeightInit::kSnakeLog);
  t.add(name + ".beta", {ch}, WeightInit::kSnakeLog);
}

void codebook(WeightTable& t, const std::string& p, int64_t size, int64_t dim, const char* sum_name) {
  t.add(p + "cluster_usage", {size}, WeightInit::kUsage);
  t.add(p + sum_name, {size, dim}, WeightInit::kEmbedding);
}

}  // namespace

void declare_decoder_weights(const CodecConfig& c, WeightTable& t) {
  const auto& d = c.decoder;
  const std::string p = "decoder.";
  const int64_t half = d.codebook_dim / 2;
  // Split RVQ: one semantic codebook group ("rvq_first") and the rest ("rvq_rest").
  for (const char* g : {"rvq_first", "rvq_rest"}) {
    const std::string q = p + "quantizer." + g + ".";
    const int64_t n = std::string(g) == "rvq_first" ? d.num_semantic_quantizers
                                                    : d.num_quantizers - d.num_semantic_quantizers;
    t.add(q + "input_proj.weight", {half, d.codebook_dim, 1});
    t.add(q + "output_proj.weight", {d.codebook_dim, half, 1});
    for (int64_t i = 0; i < n; ++i)
      codebook(t, q + "vq.layers." + std::to_string(i) + "._codebook.", d.codebook_size, half, "embedding_sum");
  }
  conv(t, p + "pre_conv.conv", d.latent_dim, d.codebook_dim, 3);
  const auto& tr = d.transformer;
  const std::string pt = p + "pre_transformer.";
  t.add(pt + "input_proj.weight", {tr.hidden, d.latent_dim});
  t.add(pt + "input_proj.bias", {tr.hidden}, WeightInit::kBias);
  const int64_t qd = tr.heads * tr.head_dim, kvd = tr.kv_heads * tr.head_dim;
  for (int64_t i = 0; i < tr.layers; ++i) {
    const std::string l = pt + "layers." + std::to_string(i) + ".";
    t.add(l + "input_layernorm.weight", {tr.hidden}, WeightInit::kNormWeight);
    t.add(l + "self_attn.q_proj.weight", {qd, tr.hidden});
    t.add(l + "self_attn.k_proj.weight", {kvd, tr.hidden});
    t.add(l + "self_attn.v_proj.weight", {kvd, tr.hidden});
    t.add(l + "self_attn.o_proj.weight", {tr.hidden, qd});
    t.add(l + "self_attn_layer_scale.scale", {tr.hidden}, WeightInit::kScale);
    t.add(l + "post_attention_layernorm.weight", {tr.hidden}, WeightInit::kNormWeight);
    t.add(l + "mlp.gate_proj.weight", {tr.intermediate, tr.hidden});
    t.add(l + "mlp.up_proj.weight", {tr.intermediate, tr.hidden});
    t.add(l + "mlp.down_proj.weight", {tr.hidden, tr.intermediate});
    t.add(l + "mlp_layer_scale.scale", {tr.hidden}, WeightInit::kScale);
  }
  t.add(pt + "norm.weight", {tr.hidden}, WeightInit::kNormWeight);
  t.add(pt + "output_proj.weight", {d.latent_dim, tr.hidden});
  t.add(pt + "output_proj.bias", {d.latent_dim}, WeightInit::kBias);
  // Latent-rate upsampling: transposed conv (k = stride = ratio) then a ConvNeXt block.
  for (size_t i = 0; i < d.upsampling_ratios.size(); ++i) {
    const std::string u = p + "upsample." + std::to_string(i) + ".";
    const int64_t L = d.latent_dim, r = d.upsampling_ratios[i];
    conv_t(t, u + "0.conv", L, L, r);
    conv(t, u + "1.dwconv.conv", L, 1, 7);
    t.add(u + "1.norm.weight", {L}, WeightInit::kNormWeight);
    t.add(u + "1.norm.bias", {L}, WeightInit::kBias);
    t.add(u + "1.pwconv1.weight", {4 * L, L});
    t.add(u + "1.pwconv1.bias", {4 * L}, WeightInit::kBias);
    t.add(u + "1.pwconv2.weight", {L, 4 * L});
    t.add(u + "1.pwconv2.bias", {L}, WeightInit::kBias);
    t.add(u + "1.gamma", {L}, WeightInit::kScale);
  }
  // Vocoder: conv in, one block per rate (SnakeBeta, transposed conv k = 2·rate, 3 residual units
  // with dilations 1, 3, 9), SnakeBeta, conv out to one channel.
  const std::string v = p + "decoder.";
  conv(t, v + "0.conv", d.decoder_dim, d.latent_dim, 7);
  int64_t ch = d.decoder_dim;
  for (size_t b = 0; b < d.upsample_rates.size(); ++b) {
    const std::string blk = v + std::to_string(b + 1) + ".block.";
    const int64_t out = ch / 2, rate = d.upsample_rates[b];
    snake(t, blk + "0", ch);
    conv_t(t, blk + "1.conv", ch, out, 2 * rate);
    for (int u = 2; u <= 4; ++u) {
      const std::string ru = blk + std::to_string(u) + ".";
      snake(t, ru + "act1", out);
      conv(t, ru + "conv1.conv", out, out, 7);
      snake(t, ru + "act2", out);
      conv(t, ru + "conv2.conv", out, out, 1);
    }
    ch = out;
  }
  const size_t nb = d.upsample_rates.size();
  snake(t, v + std::to_string(nb + 1), ch);
  conv(t, v + std::to_string(nb + 2) + ".conv", 1, ch, 7);
}

void declare_encoder_weights(const CodecConfig& c, WeightTable& t) {
  const auto& e = c.encoder;
  if (!e.present) return;
  const std::string p = "encoder.";
  // SEANet: layers are numbered as nn.Sequential indices (activations take an index too).
  int64_t idx = 0, ch = e.num_filters;
  conv(t, p + "encoder.layers." + std::to_string(idx++) + ".conv", ch, 1, e.kernel_size);
  for (auto it = e.upsampling_ratios.rbegin(); it != e.upsampling_ratios.rend(); ++it) {
    const int64_t stride = *it;
    for (int64_t r = 0; r < e.num_residual_layers; ++r) {
      const std::string blk = p + "encoder.layers." + std::to_string(idx++) + ".block.";
      conv(t, blk + "1.conv", ch / e.compress, ch, e.residual_kernel_size);
      conv(t, blk + "3.conv", ch, ch / e.compress, 1);
    }
    ++idx;  // ELU
    conv(t, p + "encoder.layers." + std::to_string(idx++) + ".conv", ch * 2, ch, 2 * stride);
    ch *= 2;
  }
  ++idx;  // ELU
  conv(t, p + "encoder.layers." + std::to_string(idx++) + ".conv", e.hidden_size, ch, e.last_kernel_size);
  const int64_t H = e.hidden_size, qd = e.num_attention_heads * e.head_dim, kvd = e.num_key_value_heads * e.head_dim;
  for (int64_t i = 0; i < e.num_hidden_layers; ++i) {
    const std::string l = p + "encoder_transformer.layers." + std::to_string(i) + ".";
    t.add(l + "input_layernorm.weight", {H}, WeightInit::kNormWeight);
    t.add(l + "input_layernorm.bias", {H}, WeightInit::kBias);
    t.add(l + "self_attn.q_proj.weight", {qd, H});
    t.add(l + "self_attn.k_proj.weight", {kvd, H});
    t.add(l + "self_attn.v_proj.weight", {kvd, H});
    t.add(l + "self_attn.o_proj.weight", {H, qd});
    t.add(l + "self_attn_layer_scale.scale", {H}, WeightInit::kScale);
    t.add(l + "post_attention_layernorm.weight", {H}, WeightInit::kNormWeight);
    t.add(l + "post_attention_layernorm.bias", {H}, WeightInit::kBias);
    t.add(l + "mlp.fc1.weight", {e.intermediate_size, H});
    t.add(l + "mlp.fc2.weight", {H, e.intermediate_size});
    t.add(l + "mlp_layer_scale.scale", {H}, WeightInit::kScale);
  }
  conv(t, p + "downsample.conv", H, H, 4, /*bias=*/false);
  for (const char* g : {"semantic_residual_vector_quantizer", "acoustic_residual_vector_quantizer"}) {
    const std::string q = p + "quantizer." + g + ".";
    const bool semantic = std::string(g).rfind("semantic", 0) == 0;
    const int64_t n = semantic ? e.num_semantic_quantizers : e.num_quantizers - e.num_semantic_quantizers;
    t.add(q + "input_proj.weight", {e.codebook_dim, H, 1});
    t.add(q + "output_proj.weight", {H, e.codebook_dim, 1});
    for (int64_t i = 0; i < n; ++i) {
      const std::string cb = q + "layers." + std::to_string(i) + ".codebook.";
      codebook(t, cb, e.codebook_size, e.codebook_dim, "embed_sum");
      t.add(cb + "initialized", {1}, WeightInit::kOnes);
    }
  }
}

WeightTable codec_weight_table(const CodecConfig& c, bool with_encoder) {
  WeightTable t;
  declare_decoder_weights(c, t);
  if (with_encoder) declare_encoder_weights(c, t);
  return t;
}

Status write_random_codec(const std::string& dir, const CodecConfig& c, uint64_t seed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::kIo, dir + ": cannot create: " + ec.message());
  const fs::path d(dir);
  CHORUS_TRY(io::write_json_file((d / "config.json").string(), codec_config_to_json(c)));
  CHORUS_TRY(io::write_json_file((d / "preprocessor_config.json").string(),
                                 {{"chunk_length_s", nullptr}, {"feature_extractor_type", "EncodecFeatureExtractor"},
                                  {"feature_size", 1}, {"overlap", nullptr}, {"padding_side", "right"},
                                  {"padding_value", 0.0}, {"return_attention_mask", true},
                                  {"sampling_rate", c.input_sample_rate}}));
  auto tensors = random_weights(codec_weight_table(c, c.encoder.present), seed ^ 0x636f646563ull, DType::kF32,
                                &ThreadPool::global());
  return io::write_safetensors((d / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

}  // namespace chorus::codec
