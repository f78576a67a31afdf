#include "models/codec/codec_config.h"

#include "io/config_reader.h"

namespace chorus::codec {

namespace {

Result<DecoderConfig> parse_decoder(const ConfigReader& r) {
  DecoderConfig d;
  CHORUS_ASSIGN(d.codebook_size, r.i64("codebook_size", 2, 1 << 20));
  CHORUS_ASSIGN(d.codebook_dim, r.i64("codebook_dim", 2, 65536));
  CHORUS_ASSIGN(d.num_quantizers, r.i64("num_quantizers", 1, 64));
  CHORUS_ASSIGN(d.num_semantic_quantizers, r.i64("num_semantic_quantizers", 1, 64, 1));
  CHORUS_ASSIGN(d.latent_dim, r.i64("latent_dim", 1, 65536));
  CHORUS_ASSIGN(d.transformer, nn::read_qwen3_dims(r));
  CHORUS_ASSIGN(d.sliding_window, r.i64("sliding_window", 1, 1 << 20, 72));
  CHORUS_ASSIGN(d.decoder_dim, r.i64("decoder_dim", 1, 65536));
  CHORUS_ASSIGN(d.upsampling_ratios, r.i64_list("upsampling_ratios", 1, 64, 8));
  CHORUS_ASSIGN(d.upsample_rates, r.i64_list("upsample_rates", 1, 64, 8));
  if (d.codebook_dim % 2 != 0)
    return make_error(ErrorCode::kInvalidFormat, r.where("codebook_dim") + " must be even");
  if (d.num_semantic_quantizers >= d.num_quantizers)
    return make_error(ErrorCode::kInvalidFormat, r.where("num_semantic_quantizers") + " must be below num_quantizers");
  if (d.upsample_rates.empty()) return make_error(ErrorCode::kInvalidFormat, r.where("upsample_rates") + " is empty");
  // Channels halve at every vocoder block: decoder_dim must stay >= 1 after all of them.
  if ((d.decoder_dim >> d.upsample_rates.size()) < 1)
    return make_error(ErrorCode::kInvalidFormat, r.where("decoder_dim") + " is too small for " +
                                                     std::to_string(d.upsample_rates.size()) + " upsampling blocks");
  return d;
}

Result<EncoderConfig> parse_encoder(const ConfigReader& r) {
  EncoderConfig e;
  e.present = true;
  CHORUS_ASSIGN(e.num_filters, r.i64("num_filters", 1, 4096));
  CHORUS_ASSIGN(e.kernel_size, r.i64("kernel_size", 1, 64));
  CHORUS_ASSIGN(e.last_kernel_size, r.i64("last_kernel_size", 1, 64));
  CHORUS_ASSIGN(e.residual_kernel_size, r.i64("residual_kernel_size", 1, 64));
  CHORUS_ASSIGN(e.num_residual_layers, r.i64("num_residual_layers", 1, 16));
  CHORUS_ASSIGN(e.dilation_growth_rate, r.i64("dilation_growth_rate", 1, 16));
  CHORUS_ASSIGN(e.compress, r.i64("compress", 1, 64));
  CHORUS_ASSIGN(e.upsampling_ratios, r.i64_list("upsampling_ratios", 1, 64, 8));
  CHORUS_ASSIGN(e.hidden_size, r.i64("hidden_size", 1, 65536));
  CHORUS_ASSIGN(e.intermediate_size, r.i64("intermediate_size", 1, 262144));
  CHORUS_ASSIGN(e.num_hidden_layers, r.i64("num_hidden_layers", 1, 256));
  CHORUS_ASSIGN(e.num_attention_heads, r.i64("num_attention_heads", 1, 1024));
  CHORUS_ASSIGN(e.num_key_value_heads, r.i64("num_key_value_heads", 1, 1024, e.num_attention_heads));
  CHORUS_ASSIGN(e.head_dim, r.i64("head_dim", 2, 1024, e.hidden_size / e.num_attention_heads));
  CHORUS_ASSIGN(e.norm_eps, r.f64("norm_eps", 1e-12, 1e-1, 1e-5));
  CHORUS_ASSIGN(e.rope_theta, r.f64("rope_theta", 1.0, 1e12, 1e4));
  CHORUS_ASSIGN(e.sliding_window, r.i64("sliding_window", 1, 1 << 20, 250));
  CHORUS_ASSIGN(e.max_position_embeddings, r.i64("max_position_embeddings", 1, 1 << 24, 8000));
  CHORUS_ASSIGN(e.codebook_dim, r.i64("codebook_dim", 1, 65536));
  CHORUS_ASSIGN(e.codebook_size, r.i64("codebook_size", 2, 1 << 20));
  CHORUS_ASSIGN(e.num_quantizers, r.i64("num_quantizers", 1, 64));
  CHORUS_ASSIGN(e.num_semantic_quantizers, r.i64("num_semantic_quantizers", 1, 64, 1));
  if (e.num_attention_heads % e.num_key_value_heads != 0)
    return make_error(ErrorCode::kInvalidFormat, r.path() + ": num_attention_heads is not a multiple of num_key_value_heads");
  if (e.upsampling_ratios.empty()) return make_error(ErrorCode::kInvalidFormat, r.where("upsampling_ratios") + " is empty");
  if (e.num_semantic_quantizers >= e.num_quantizers)
    return make_error(ErrorCode::kInvalidFormat, r.where("num_semantic_quantizers") + " must be below num_quantizers");
  return e;
}

}  // namespace

Result<CodecConfig> parse_codec_config(const nlohmann::json& root, const std::string& label) {
  ConfigReader r(root, label);
  CodecConfig c;
  CHORUS_ASSIGN(c.sample_rate, r.i64("output_sample_rate", 8000, 192000, 24000));
  CHORUS_ASSIGN(c.input_sample_rate, r.i64("input_sample_rate", 8000, 192000, 24000));
  CHORUS_ASSIGN(c.samples_per_frame, r.i64("decode_upsample_rate", 1, 1 << 16, 1920));
  CHORUS_ASSIGN(c.encoder_valid_num_quantizers, r.i64("encoder_valid_num_quantizers", 1, 64, 16));
  CHORUS_ASSIGN(auto dr, r.child("decoder_config"));
  CHORUS_ASSIGN(c.decoder, parse_decoder(dr));
  int64_t prod = 1;
  for (auto v : c.decoder.upsampling_ratios) prod *= v;
  for (auto v : c.decoder.upsample_rates) prod *= v;
  if (prod != c.samples_per_frame)
    return make_error(ErrorCode::kInvalidFormat,
                      label + ": the decoder upsamples by " + std::to_string(prod) +
                          " per frame but decode_upsample_rate is " + std::to_string(c.samples_per_frame));
  if (!r.is_null("encoder_config")) {
    CHORUS_ASSIGN(auto er, r.child("encoder_config"));
    CHORUS_ASSIGN(c.encoder, parse_encoder(er));
    if (c.encoder_valid_num_quantizers > c.encoder.num_quantizers)
      return make_error(ErrorCode::kInvalidFormat, label + ": encoder_valid_num_quantizers exceeds encoder num_quantizers");
  }
  return c;
}

Result<CodecConfig> load_codec_config(const std::string& file) {
  CHORUS_ASSIGN(auto root, ConfigReader::parse_file(file));
  return parse_codec_config(root, file);
}

nlohmann::json codec_config_to_json(const CodecConfig& c) {
  using nlohmann::json;
  const auto& d = c.decoder;
  json dec = {
      {"attention_bias", false}, {"attention_dropout", 0.0}, {"latent_dim", d.latent_dim},
      {"codebook_dim", d.codebook_dim}, {"codebook_size", d.codebook_size}, {"decoder_dim", d.decoder_dim},
      {"hidden_act", "silu"}, {"hidden_size", d.transformer.hidden},
      {"intermediate_size", d.transformer.intermediate}, {"layer_scale_initial_scale", 0.01},
      {"max_position_embeddings", d.transformer.max_positions}, {"head_dim", d.transformer.head_dim},
      {"num_attention_heads", d.transformer.heads}, {"num_hidden_layers", d.transformer.layers},
      {"num_key_value_heads", d.transformer.kv_heads}, {"num_quantizers", d.num_quantizers},
      {"num_semantic_quantizers", d.num_semantic_quantizers}, {"rms_norm_eps", d.transformer.rms_eps},
      {"rope_theta", d.transformer.rope_theta}, {"semantic_codebook_size", 4096},
      {"sliding_window", d.sliding_window}, {"upsample_rates", d.upsample_rates},
      {"upsampling_ratios", d.upsampling_ratios}, {"vector_quantization_hidden_dimension", d.codebook_dim}};
  json root = {{"architectures", {"Qwen3TTSTokenizerV2Model"}},
               {"model_type", "qwen3_tts_tokenizer_12hz"},
               {"encoder_valid_num_quantizers", c.encoder_valid_num_quantizers},
               {"input_sample_rate", c.input_sample_rate},
               {"output_sample_rate", c.sample_rate},
               {"decode_upsample_rate", c.samples_per_frame},
               {"encode_downsample_rate", c.samples_per_frame},
               {"decoder_config", dec}};
  if (c.encoder.present) {
    const auto& e = c.encoder;
    root["encoder_config"] = {
        {"_frame_rate", 12.5}, {"attention_bias", false}, {"audio_channels", 1},
        {"codebook_dim", e.codebook_dim}, {"codebook_size", e.codebook_size}, {"compress", e.compress},
        {"dilation_growth_rate", e.dilation_growth_rate}, {"head_dim", e.head_dim}, {"hidden_act", "gelu"},
        {"hidden_size", e.hidden_size}, {"intermediate_size", e.intermediate_size},
        {"kernel_size", e.kernel_size}, {"last_kernel_size", e.last_kernel_size},
        {"layer_scale_initial_scale", 0.01}, {"max_position_embeddings", e.max_position_embeddings},
        {"model_type", "mimi"}, {"norm_eps", e.norm_eps}, {"normalize", false},
        {"num_attention_heads", e.num_attention_heads}, {"num_filters", e.num_filters},
        {"num_hidden_layers", e.num_hidden_layers}, {"num_key_value_heads", e.num_key_value_heads},
        {"num_quantizers", e.num_quantizers}, {"num_residual_layers", e.num_residual_layers},
        {"num_semantic_quantizers", e.num_semantic_quantizers}, {"pad_mode", "constant"},
        {"residual_kernel_size", e.residual_kernel_size}, {"rope_theta", e.rope_theta},
        {"sampling_rate", c.input_sample_rate}, {"sliding_window", e.sliding_window},
        {"trim_right_ratio", 1.0}, {"upsampling_ratios", e.upsampling_ratios}, {"use_cache", false},
        {"use_causal_conv", true}, {"use_conv_shortcut", false}, {"use_streaming", false},
        {"vector_quantization_hidden_dimension", e.codebook_dim}};
  }
  root["torch_dtype"] = "float32";
  return root;
}

const char* codec_precision_name(CodecPrecision p) { return p == CodecPrecision::kBf16 ? "bf16" : "f32"; }

Result<CodecPrecision> parse_codec_precision(const std::string& name) {
  if (name == "f32") return CodecPrecision::kF32;
  if (name == "bf16") return CodecPrecision::kBf16;
  return make_error(ErrorCode::kInvalidArgument, "codec precision \"" + name + "\": expected f32 or bf16");
}

CodecConfig preset_12hz(bool tiny) {
  CodecConfig c;
  auto& d = c.decoder;
  auto& e = c.encoder;
  e.present = true;
  if (tiny) {
    d.codebook_dim = 8;
    d.latent_dim = 48;
    d.transformer = nn::qwen3_dims(32, 64, 2, 4, 4, 16, 1e-5, 10000, 8000);
    d.decoder_dim = 64;
    e.num_filters = 4;
    e.hidden_size = 32;
    e.intermediate_size = 64;
    e.num_hidden_layers = 2;
    e.num_attention_heads = 4;
    e.num_key_value_heads = 4;
    e.head_dim = 8;
    e.sliding_window = 24;
    e.codebook_dim = 4;
  } else {
    d.transformer = nn::qwen3_dims(512, 1024, 8, 16, 16, 64, 1e-5, 10000, 8000);
  }
  return c;
}

}  // namespace chorus::codec
