#include "models/breeze_tts/config.h"

#include <filesystem>
#include <set>

#include "io/config_reader.h"
#include "io/generation_json.h"
#include "models/config_folder.h"

namespace chorus::breeze_tts {

namespace {

constexpr int64_t kMaxTokenId = (1 << 24) - 1;
constexpr int kSpeakerTags = 10;  // [S0]..[S9]
constexpr int64_t kRealSpeaker0 = 262146, kRealInsBos = 262156, kRealInsEos = 262157;

Error bad(const std::string& where, const std::string& what) {
  return make_error(ErrorCode::kInvalidFormat, where + " " + what);
}

Status require_activation(const ConfigReader& r, const char* key, const std::string& want, const std::string& def) {
  CHORUS_ASSIGN(auto act, r.str(key, def));
  if (act != want)
    return make_error(ErrorCode::kUnsupported, r.where(key) + " = \"" + act + "\" (only " + want + " is supported)");
  return ok_status();
}

// null / absent / "default" -> disabled; "llama3" -> its four parameters; anything else unsupported.
Result<Llama3RopeScaling> parse_llama3(const ConfigReader& r) {
  Llama3RopeScaling s;
  if (r.is_null("rope_scaling")) return s;
  CHORUS_ASSIGN(auto rs, r.child("rope_scaling"));
  CHORUS_ASSIGN(auto type, rs.str("rope_type", std::string("")));
  if (type.empty()) { CHORUS_ASSIGN(type, rs.str("type", std::string("default"))); }
  if (type == "default") return s;
  if (type != "llama3")
    return make_error(ErrorCode::kUnsupported, rs.where("rope_type") + " = \"" + type + "\" (expected llama3 or default)");
  s.enabled = true;
  CHORUS_ASSIGN(s.factor, rs.f64("factor", 1e-3, 1e6));
  CHORUS_ASSIGN(s.low_freq_factor, rs.f64("low_freq_factor", 1e-9, 1e6));
  CHORUS_ASSIGN(s.high_freq_factor, rs.f64("high_freq_factor", 1e-9, 1e6));
  CHORUS_ASSIGN(s.original_max_positions, rs.i64("original_max_position_embeddings", 1, 1 << 24));
  // The smoothing divides by (high - low), and the bands need low < high to be ordered.
  if (!(s.low_freq_factor < s.high_freq_factor))
    return bad(rs.path(), "needs low_freq_factor < high_freq_factor");
  return s;
}

Result<BackboneConfig> parse_backbone(const ConfigReader& r) {
  BackboneConfig b;
  CHORUS_ASSIGN(b.dims, nn::read_qwen3_dims(r));
  CHORUS_TRY(require_activation(r, "hidden_act", "silu", "silu"));
  CHORUS_ASSIGN(auto mt, r.str("model_type", std::string("qwen3")));
  if (mt != "qwen3") return make_error(ErrorCode::kUnsupported, r.where("model_type") + " = \"" + mt + "\" (expected qwen3)");
  CHORUS_ASSIGN(auto sliding, r.boolean("use_sliding_window", false));
  if (sliding) return make_error(ErrorCode::kUnsupported, r.where("use_sliding_window") + " = true is not supported");
  CHORUS_ASSIGN(auto scaling, parse_llama3(r));
  if (scaling.enabled) return make_error(ErrorCode::kUnsupported, r.where("rope_scaling") + ": the backbone uses plain RoPE");
  return b;
}

Result<DepthDecoderConfig> parse_depth(const ConfigReader& r) {
  DepthDecoderConfig d;
  CHORUS_ASSIGN(d.dims, nn::read_qwen3_dims(r));
  CHORUS_TRY(require_activation(r, "hidden_act", "silu", "silu"));
  CHORUS_ASSIGN(d.rope_scaling, parse_llama3(r));
  CHORUS_ASSIGN(d.vocab, r.i64("vocab_size", 2, 1 << 20));
  CHORUS_ASSIGN(d.num_codebooks, r.i64("num_codebooks", 2, 64));
  CHORUS_ASSIGN(d.backbone_hidden, r.i64("backbone_hidden_size", 1, 65536));
  CHORUS_ASSIGN(d.audio_embed, r.i64("audio_embed_size", 1, 65536, d.backbone_hidden));
  // Positions 0..num_codebooks-1 are used (the hidden state, then codes c0..c14).
  if (d.dims.max_positions < d.num_codebooks)
    return bad(r.where("max_position_embeddings"), "= " + std::to_string(d.dims.max_positions) + " is below num_codebooks " +
                                                       std::to_string(d.num_codebooks));
  return d;
}

Result<TextRope> parse_text_rope(const ConfigReader& r, const std::string& where) {
  TextRope t;
  CHORUS_ASSIGN(t.theta, r.f64("rope_theta", 1.0, 1e12));
  CHORUS_ASSIGN(auto type, r.str("rope_type", std::string("default")));
  if (type == "linear") {
    CHORUS_ASSIGN(t.linear_factor, r.f64("factor", 1e-6, 1e6));
  } else if (type != "default") {
    return make_error(ErrorCode::kUnsupported, where + ".rope_type = \"" + type + "\" (expected default or linear)");
  }
  return t;
}

Result<std::vector<TextLayerType>> parse_layer_types(const ConfigReader& r, const nlohmann::json& obj, int64_t layers) {
  std::vector<TextLayerType> out;
  auto it = obj.find("layer_types");
  if (it == obj.end() || it->is_null()) {
    // Gemma 3's older form: every `sliding_window_pattern`-th layer is global.
    CHORUS_ASSIGN(auto pattern, r.i64("sliding_window_pattern", 1, 1024, 6));
    for (int64_t i = 0; i < layers; ++i)
      out.push_back((i + 1) % pattern == 0 ? TextLayerType::kFull : TextLayerType::kSliding);
    return out;
  }
  if (!it->is_array()) return bad(r.where("layer_types"), "should be a list of strings");
  if (static_cast<int64_t>(it->size()) != layers)
    return bad(r.where("layer_types"), "has " + std::to_string(it->size()) + " entries for " + std::to_string(layers) + " layers");
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& v = (*it)[i];
    const std::string s = v.is_string() ? v.get<std::string>() : std::string();
    if (s == "sliding_attention") out.push_back(TextLayerType::kSliding);
    else if (s == "full_attention") out.push_back(TextLayerType::kFull);
    else
      return bad(r.where("layer_types") + "[" + std::to_string(i) + "]", "should be \"sliding_attention\" or \"full_attention\"");
  }
  return out;
}

Result<TextEncoderConfig> parse_text_encoder(const ConfigReader& r, const nlohmann::json& obj) {
  TextEncoderConfig t;
  CHORUS_ASSIGN(auto mt, r.str("model_type", std::string("t5gemma2_text")));
  if (mt != "t5gemma2_text")
    return make_error(ErrorCode::kUnsupported, r.where("model_type") + " = \"" + mt + "\" (expected t5gemma2_text)");
  CHORUS_ASSIGN(t.hidden, r.i64("hidden_size", 1, 65536));
  CHORUS_ASSIGN(t.intermediate, r.i64("intermediate_size", 1, 262144));
  CHORUS_ASSIGN(t.layers, r.i64("num_hidden_layers", 1, 512));
  CHORUS_ASSIGN(t.heads, r.i64("num_attention_heads", 1, 1024));
  CHORUS_ASSIGN(t.kv_heads, r.i64("num_key_value_heads", 1, 1024, t.heads));
  CHORUS_ASSIGN(t.head_dim, r.i64("head_dim", 2, 1024, 256));
  CHORUS_ASSIGN(t.rms_eps, r.f64("rms_norm_eps", 1e-12, 1e-1, 1e-6));
  CHORUS_ASSIGN(t.query_pre_attn_scalar, r.f64("query_pre_attn_scalar", 1e-6, 1e9, static_cast<double>(t.head_dim)));
  CHORUS_ASSIGN(t.sliding_window, r.i64("sliding_window", 1, 1 << 24, 512));
  CHORUS_ASSIGN(t.max_positions, r.i64("max_position_embeddings", 1, 1 << 24, 131072));
  CHORUS_ASSIGN(t.eoi_token_id, r.i64("eoi_token_index", -1, kMaxTokenId, -1));
  if (t.heads % t.kv_heads != 0)
    return bad(r.path(), ": num_attention_heads is not a multiple of num_key_value_heads");
  if (t.head_dim % 2 != 0) return bad(r.where("head_dim"), "must be even for rotary embeddings");
  const char* act_key = r.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  CHORUS_TRY(require_activation(r, act_key, "gelu_pytorch_tanh", "gelu_pytorch_tanh"));
  if (!r.is_null("attn_logit_softcapping"))
    return make_error(ErrorCode::kUnsupported, r.where("attn_logit_softcapping") + " is set; soft-capping is not supported");
  CHORUS_ASSIGN(t.layer_types, parse_layer_types(r, obj, t.layers));
  if (!r.is_null("rope_parameters")) {
    CHORUS_ASSIGN(auto rp, r.child("rope_parameters"));
    CHORUS_ASSIGN(auto sl, rp.child("sliding_attention"));
    CHORUS_ASSIGN(t.rope_sliding, parse_text_rope(sl, sl.path()));
    CHORUS_ASSIGN(auto fu, rp.child("full_attention"));
    CHORUS_ASSIGN(t.rope_full, parse_text_rope(fu, fu.path()));
  } else {
    // Gemma 3's older keys: rope_local_base_freq for sliding layers, rope_theta + rope_scaling for full.
    CHORUS_ASSIGN(t.rope_sliding.theta, r.f64("rope_local_base_freq", 1.0, 1e12, 10000.0));
    CHORUS_ASSIGN(t.rope_full.theta, r.f64("rope_theta", 1.0, 1e12, 1e6));
    t.rope_full.linear_factor = 1.0;
    if (!r.is_null("rope_scaling")) {
      CHORUS_ASSIGN(auto rs, r.child("rope_scaling"));
      nlohmann::json merged = obj["rope_scaling"];
      merged["rope_theta"] = t.rope_full.theta;
      ConfigReader mr(merged, rs.path());
      CHORUS_ASSIGN(t.rope_full, parse_text_rope(mr, rs.path()));
    }
  }
  return t;
}

// `[S0]`..`[S9]`, `<ins_bos>`, `<ins_eos>` from text_encoder_special_tokens_config.token_ids; the
// released ids when the block is absent (they are then range-checked like any other id).
Status parse_special_tokens(const ConfigReader& r, SpecialIds& ids) {
  std::map<std::string, int64_t> m;
  if (!r.is_null("text_encoder_special_tokens_config")) {
    CHORUS_ASSIGN(auto st, r.child("text_encoder_special_tokens_config"));
    CHORUS_ASSIGN(m, st.int_map("token_ids", 0, kMaxTokenId));  // keys lower-cased
  }
  auto get = [&](const std::string& k, int64_t def) {
    auto it = m.find(k);
    return it == m.end() ? def : it->second;
  };
  ids.speakers.clear();
  for (int i = 0; i < kSpeakerTags; ++i) ids.speakers.push_back(get("[s" + std::to_string(i) + "]", kRealSpeaker0 + i));
  ids.ins_bos = get("<ins_bos>", kRealInsBos);
  ids.ins_eos = get("<ins_eos>", kRealInsEos);
  return ok_status();
}

Status check_ids(const Config& c, const std::string& label) {
  const auto& ids = c.ids;
  auto in_text = [&](const char* name, int64_t id) -> Status {
    if (id < 0 || id >= c.text_vocab)
      return make_error(ErrorCode::kOutOfRange, label + ": " + name + " = " + std::to_string(id) +
                                                    " is outside the text vocabulary [0, " + std::to_string(c.text_vocab) + ")");
    return ok_status();
  };
  CHORUS_TRY(in_text("pad_token_id", ids.pad));
  CHORUS_TRY(in_text("eos_token_id", ids.eos));
  CHORUS_TRY(in_text("bos_token_id", ids.bos));
  CHORUS_TRY(in_text("audio_token_id", ids.audio));
  CHORUS_TRY(in_text("audio_eos_token_id", ids.audio_eos));
  CHORUS_TRY(in_text("<ins_bos>", ids.ins_bos));
  CHORUS_TRY(in_text("<ins_eos>", ids.ins_eos));
  for (size_t i = 0; i < ids.speakers.size(); ++i) CHORUS_TRY(in_text(("[S" + std::to_string(i) + "]").c_str(), ids.speakers[i]));
  if (c.text_encoder.eoi_token_id >= c.text_vocab)
    return make_error(ErrorCode::kOutOfRange, label + ": text_encoder_config.eoi_token_index is outside the text vocabulary");
  // The prompt builder tells rows apart by these ids, so none may double as another.
  std::set<int64_t> seen;
  std::vector<int64_t> marks = {ids.bos, ids.audio, ids.audio_eos, ids.ins_bos, ids.ins_eos};
  marks.insert(marks.end(), ids.speakers.begin(), ids.speakers.end());
  for (int64_t id : marks)
    if (!seen.insert(id).second)
      return make_error(ErrorCode::kInvalidFormat, label + ": special token id " + std::to_string(id) + " is used twice");
  if (ids.codebook_pad < c.codec_codebook_size || ids.codebook_pad >= c.audio_vocab)
    return make_error(ErrorCode::kOutOfRange, label + ": codebook_pad_token_id = " + std::to_string(ids.codebook_pad) +
                                                  " is not a reserved audio id [" + std::to_string(c.codec_codebook_size) +
                                                  ", " + std::to_string(c.audio_vocab) + ")");
  if (ids.codebook_eos < 0 || ids.codebook_eos >= c.codec_codebook_size)
    return make_error(ErrorCode::kOutOfRange, label + ": codebook_eos_token_id = " + std::to_string(ids.codebook_eos) +
                                                  " is not a codec code [0, " + std::to_string(c.codec_codebook_size) + ")");
  return ok_status();
}

}  // namespace

Result<Config> parse_config(const nlohmann::json& root, const std::string& label) {
  ConfigReader r(root, label);
  Config c;
  CHORUS_ASSIGN(auto mt, r.str("model_type"));
  if (mt != "breeze") return make_error(ErrorCode::kUnsupported, label + ": model_type \"" + mt + "\" is not breeze");
  CHORUS_ASSIGN(auto bmt, r.str("backbone_model_type", std::string("qwen3")));
  if (bmt != "qwen3")
    return make_error(ErrorCode::kUnsupported, label + ": backbone_model_type \"" + bmt + "\" (only qwen3 is supported)");

  CHORUS_ASSIGN(auto br, r.child("backbone_config"));
  CHORUS_ASSIGN(c.backbone, parse_backbone(br));
  c.hidden = c.backbone.dims.hidden;
  CHORUS_ASSIGN(auto dr, r.child("depth_decoder_config"));
  CHORUS_ASSIGN(c.depth, parse_depth(dr));
  CHORUS_ASSIGN(auto tr, r.child("text_encoder_config"));
  CHORUS_ASSIGN(c.text_encoder, parse_text_encoder(tr, root["text_encoder_config"]));

  // audio_* aliases win over the plain keys (a converted config may carry a stray Qwen vocab_size).
  const char* ncb_key = r.has("audio_num_codebooks") ? "audio_num_codebooks" : "num_codebooks";
  CHORUS_ASSIGN(c.num_codebooks, r.i64(ncb_key, 2, 64));
  const char* vocab_key = r.has("audio_vocab_size") ? "audio_vocab_size" : "vocab_size";
  CHORUS_ASSIGN(c.audio_vocab, r.i64(vocab_key, 2, 1 << 20));
  CHORUS_ASSIGN(c.audio_embed, r.i64("audio_embed_size", 1, 65536, c.hidden));
  CHORUS_ASSIGN(c.text_vocab, r.i64("text_vocab_size", 1, kMaxTokenId + 1));
  CHORUS_ASSIGN(auto tied, r.boolean("tie_codebooks_embeddings", true));
  if (!tied)
    return make_error(ErrorCode::kUnsupported, label + ": tie_codebooks_embeddings = false (the released model ties "
                                                       "the backbone audio table to the depth decoder's)");
  CHORUS_ASSIGN(auto proj, r.str("text_encoder_proj_type", std::string("linear")));
  if (proj != "linear")
    return make_error(ErrorCode::kUnsupported, label + ": text_encoder_proj_type \"" + proj + "\" (only linear)");
  CHORUS_ASSIGN(auto feature_layer, r.i64("text_encoder_feature_layer_idx", -1024, 1024, -1));
  if (feature_layer != -1)
    return make_error(ErrorCode::kUnsupported, label + ": text_encoder_feature_layer_idx = " + std::to_string(feature_layer) +
                                                   " (only -1, the encoder's final output, is supported)");
  if (!r.is_null("codec_config")) {
    CHORUS_ASSIGN(auto cr, r.child("codec_config"));
    CHORUS_ASSIGN(c.codec_codebook_size, cr.i64("codebook_size", 1, 1 << 20, 2048));
    CHORUS_ASSIGN(c.sample_rate, cr.i64("sampling_rate", 8000, 192000, 24000));
  }

  // The shared audio table feeds the backbone unprojected and the depth decoder through its
  // projector; configs that need the upstream's extra projectors are not handled.
  if (c.audio_embed != c.hidden)
    return make_error(ErrorCode::kUnsupported, label + ": audio_embed_size " + std::to_string(c.audio_embed) +
                                                   " differs from the backbone hidden size " + std::to_string(c.hidden));
  if (c.depth.backbone_hidden != c.hidden)
    return bad(dr.where("backbone_hidden_size"), "= " + std::to_string(c.depth.backbone_hidden) +
                                                     " differs from backbone_config.hidden_size " + std::to_string(c.hidden));
  if (c.depth.audio_embed != c.audio_embed)
    return bad(dr.where("audio_embed_size"), "differs from the wrapper's audio_embed_size");
  if (c.depth.vocab != c.audio_vocab) return bad(dr.where("vocab_size"), "differs from the wrapper's vocab_size");
  if (c.depth.num_codebooks != c.num_codebooks) return bad(dr.where("num_codebooks"), "differs from the wrapper's num_codebooks");
  if (c.codec_codebook_size > c.audio_vocab)
    return bad(label + ": codec_config.codebook_size", "exceeds the audio vocabulary");

  CHORUS_ASSIGN(c.ids.pad, r.i64("pad_token_id", 0, kMaxTokenId, 0));
  CHORUS_ASSIGN(c.ids.eos, r.i64("eos_token_id", 0, kMaxTokenId, 1));
  CHORUS_ASSIGN(c.ids.bos, r.i64("bos_token_id", 0, kMaxTokenId, 2));
  CHORUS_ASSIGN(c.ids.audio, r.i64("audio_token_id", 0, kMaxTokenId));
  CHORUS_ASSIGN(c.ids.audio_eos, r.i64("audio_eos_token_id", 0, kMaxTokenId));
  CHORUS_ASSIGN(c.ids.codebook_pad, r.i64("codebook_pad_token_id", 0, 1 << 20));
  CHORUS_ASSIGN(c.ids.codebook_eos, r.i64("codebook_eos_token_id", 0, 1 << 20, 0));
  CHORUS_TRY(parse_special_tokens(r, c.ids));
  CHORUS_TRY(check_ids(c, label));
  return c;
}

Status parse_generation_config(const nlohmann::json& root, const std::string& label, GenerationDefaults& g) {
  ConfigReader r(root, label);
  CHORUS_ASSIGN(g.do_sample, r.boolean("do_sample", g.do_sample));
  CHORUS_ASSIGN(g.temperature, r.f64("temperature", 0.0, 100.0, g.temperature));
  CHORUS_ASSIGN(g.top_k, r.i64("top_k", 0, 1 << 20, g.top_k));
  CHORUS_ASSIGN(g.top_p, r.f64("top_p", 0.0, 1.0, g.top_p));
  CHORUS_ASSIGN(g.depth_do_sample, r.boolean("depth_decoder_do_sample", g.depth_do_sample));
  CHORUS_ASSIGN(g.depth_temperature, r.f64("depth_decoder_temperature", 0.0, 100.0, g.depth_temperature));
  CHORUS_ASSIGN(g.depth_top_k, r.i64("depth_decoder_top_k", 0, 1 << 20, g.depth_top_k));
  CHORUS_ASSIGN(g.depth_top_p, r.f64("depth_decoder_top_p", 0.0, 1.0, g.depth_top_p));
  CHORUS_ASSIGN(g.repetition_penalty, r.f64("repetition_penalty", 1e-3, 100.0, g.repetition_penalty));
  CHORUS_ASSIGN(g.config_max_new_tokens, r.i64("max_new_tokens", 1, 1 << 20, g.config_max_new_tokens));
  return ok_status();
}

Result<Config> load_config(const std::string& dir) {
  std::string codec_file;
  CHORUS_ASSIGN(Config c, load_config_folder<Config>(
                              dir, "Breeze TTS 2", "audio_tokenizer", parse_config,
                              [](const nlohmann::json& root, const std::string& label, Config& cfg) {
                                return parse_generation_config(root, label, cfg.generation);
                              },
                              codec_file));
  if (c.codec.decoder.num_quantizers != c.num_codebooks)
    return make_error(ErrorCode::kInvalidFormat, codec_file + ": the codec has " + std::to_string(c.codec.decoder.num_quantizers) +
                                                     " codebooks but the model predicts " + std::to_string(c.num_codebooks));
  if (c.codec.decoder.codebook_size != c.codec_codebook_size)
    return make_error(ErrorCode::kInvalidFormat, codec_file + ": codebook_size " + std::to_string(c.codec.decoder.codebook_size) +
                                                     " differs from config.json codec_config.codebook_size " +
                                                     std::to_string(c.codec_codebook_size));
  if (c.codec.sample_rate != c.sample_rate)
    return make_error(ErrorCode::kInvalidFormat, codec_file + ": output_sample_rate differs from config.json codec_config.sampling_rate");
  return c;
}

namespace {

nlohmann::json qwen3_dims_json(const nn::Qwen3Dims& d) {
  return {{"hidden_size", d.hidden},          {"intermediate_size", d.intermediate},
          {"num_hidden_layers", d.layers},    {"num_attention_heads", d.heads},
          {"num_key_value_heads", d.kv_heads}, {"head_dim", d.head_dim},
          {"hidden_act", "silu"},             {"max_position_embeddings", d.max_positions},
          {"rms_norm_eps", d.rms_eps},        {"rope_theta", d.rope_theta},
          {"attention_bias", false},          {"attention_dropout", 0.0},
          {"use_cache", true}};
}

nlohmann::json text_rope_json(const TextRope& r) {
  if (r.linear_factor == 1.0) return {{"rope_theta", r.theta}, {"rope_type", "default"}};
  return {{"factor", r.linear_factor}, {"rope_theta", r.theta}, {"rope_type", "linear"}};
}

}  // namespace

nlohmann::json config_to_json(const Config& c) {
  using nlohmann::json;
  const auto& bd = c.backbone.dims;
  json backbone = qwen3_dims_json(bd);
  backbone["architectures"] = {"Qwen3ForCausalLM"};
  backbone["model_type"] = "qwen3";
  backbone["rope_scaling"] = nullptr;
  backbone["use_sliding_window"] = false;
  backbone["sliding_window"] = nullptr;
  backbone["layer_types"] = std::vector<std::string>(bd.layers, "full_attention");
  backbone["vocab_size"] = 151936;  // the nested Qwen value; unused
  backbone["tie_word_embeddings"] = true;

  const auto& d = c.depth;
  json depth = qwen3_dims_json(d.dims);
  depth["model_type"] = "breeze_depth_decoder_model";
  depth["num_codebooks"] = d.num_codebooks;
  depth["backbone_hidden_size"] = d.backbone_hidden;
  depth["audio_embed_size"] = d.audio_embed;
  depth["vocab_size"] = d.vocab;
  depth["mlp_bias"] = false;
  if (d.rope_scaling.enabled)
    depth["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", d.rope_scaling.factor},
                             {"low_freq_factor", d.rope_scaling.low_freq_factor},
                             {"high_freq_factor", d.rope_scaling.high_freq_factor},
                             {"original_max_position_embeddings", d.rope_scaling.original_max_positions}};
  else
    depth["rope_scaling"] = nullptr;

  const auto& t = c.text_encoder;
  std::vector<std::string> types;
  for (auto lt : t.layer_types) types.push_back(lt == TextLayerType::kFull ? "full_attention" : "sliding_attention");
  json text = {{"model_type", "t5gemma2_text"},
               {"vocab_size", c.text_vocab},
               {"hidden_size", t.hidden},
               {"intermediate_size", t.intermediate},
               {"num_hidden_layers", t.layers},
               {"num_attention_heads", t.heads},
               {"num_key_value_heads", t.kv_heads},
               {"head_dim", t.head_dim},
               {"hidden_activation", "gelu_pytorch_tanh"},
               {"max_position_embeddings", t.max_positions},
               {"rms_norm_eps", t.rms_eps},
               {"attention_bias", false},
               {"attention_dropout", 0.0},
               {"dropout_rate", 0.0},
               {"query_pre_attn_scalar", t.query_pre_attn_scalar},
               {"sliding_window", t.sliding_window},
               {"layer_types", types},
               {"final_logit_softcapping", nullptr},
               {"attn_logit_softcapping", nullptr},
               {"pad_token_id", c.ids.pad},
               {"eos_token_id", c.ids.eos},
               {"bos_token_id", c.ids.bos},
               // Present upstream and ignored: the encoder is bidirectional regardless.
               {"use_bidirectional_attention", false},
               {"rope_parameters", {{"full_attention", text_rope_json(t.rope_full)},
                                    {"sliding_attention", text_rope_json(t.rope_sliding)}}}};
  if (t.eoi_token_id >= 0) text["eoi_token_index"] = t.eoi_token_id;

  json token_ids = json::object();
  std::vector<std::string> speaker_names;
  for (size_t i = 0; i < c.ids.speakers.size(); ++i) {
    const std::string name = "[S" + std::to_string(i) + "]";
    speaker_names.push_back(name);
    token_ids[name] = c.ids.speakers[i];
  }
  token_ids["<ins_bos>"] = c.ids.ins_bos;
  token_ids["<ins_eos>"] = c.ids.ins_eos;

  json root = {{"architectures", {"BreezeForConditionalGeneration"}},
               {"model_type", "breeze"},
               {"backbone_model_type", "qwen3"},
               {"num_codebooks", c.num_codebooks},
               {"vocab_size", c.audio_vocab},
               {"text_vocab_size", c.text_vocab},
               {"hidden_size", c.hidden},
               {"audio_embed_size", c.audio_embed},
               {"intermediate_size", bd.intermediate},
               {"num_hidden_layers", bd.layers},
               {"num_attention_heads", bd.heads},
               {"num_key_value_heads", bd.kv_heads},
               {"head_dim", bd.head_dim},
               {"hidden_act", "silu"},
               // The top-level decoys of the release; no stage reads them.
               {"max_position_embeddings", 2048},
               {"rms_norm_eps", 1e-5},
               {"rope_theta", 500000},
               {"rope_scaling", {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                                 {"original_max_position_embeddings", 1024}, {"rope_type", "llama3"}}},
               {"pad_token_id", c.ids.pad},
               {"bos_token_id", c.ids.bos},
               {"eos_token_id", c.ids.eos},
               {"codebook_pad_token_id", c.ids.codebook_pad},
               {"codebook_eos_token_id", c.ids.codebook_eos},
               {"audio_token_id", c.ids.audio},
               {"audio_eos_token_id", c.ids.audio_eos},
               {"tie_codebooks_embeddings", true},
               {"tie_word_embeddings", false},
               {"backbone_config", backbone},
               {"depth_decoder_config", depth},
               // A leftover Mimi config upstream; only these two keys are read.
               {"codec_config", {{"model_type", "mimi"}, {"codebook_size", c.codec_codebook_size},
                                 {"sampling_rate", c.sample_rate}}},
               {"text_encoder_config", text},
               {"text_encoder_proj_type", "linear"},
               {"text_encoder_special_tokens_config",
                {{"enabled", false}, {"merged_into_base", true}, {"speaker_tokens", speaker_names}, {"token_ids", token_ids}}},
               {"text_encoder_lora_config", {{"enabled", false}, {"merged_into_base", true}, {"r", 8}}},
               {"torch_dtype", "bfloat16"}};
  return root;
}

nlohmann::json generation_to_json(const GenerationDefaults& g) {
  nlohmann::json j = nlohmann::json::object();
  io::put_sampler_keys(j, "do_sample", "", g.do_sample, g.temperature, g.top_k, g.top_p);
  io::put_sampler_keys(j, "depth_decoder_do_sample", "depth_decoder_", g.depth_do_sample, g.depth_temperature,
                       g.depth_top_k, g.depth_top_p);
  j["max_new_tokens"] = g.config_max_new_tokens;
  return j;
}

}  // namespace chorus::breeze_tts
