#include "models/qwen3_tts/config.h"

#include <filesystem>

#include "io/config_reader.h"
#include "io/generation_json.h"
#include "models/config_folder.h"

namespace chorus::qwen3_tts {

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kBase: return "base";
    case Variant::kCustomVoice: return "custom_voice";
    case Variant::kVoiceDesign: return "voice_design";
  }
  return "?";
}

std::optional<Variant> variant_from_name(const std::string& s) {
  if (s == "base") return Variant::kBase;
  if (s == "custom_voice") return Variant::kCustomVoice;
  if (s == "voice_design") return Variant::kVoiceDesign;
  return std::nullopt;
}

namespace {

constexpr int64_t kMaxTokenId = (1 << 24) - 1;

Result<TalkerConfig> parse_talker(const ConfigReader& r) {
  TalkerConfig t;
  CHORUS_ASSIGN(t.dims, nn::read_qwen3_dims(r));
  CHORUS_ASSIGN(t.codec_vocab, r.i64("vocab_size", 2, 1 << 20));
  CHORUS_ASSIGN(t.text_vocab, r.i64("text_vocab_size", 1, kMaxTokenId));
  CHORUS_ASSIGN(t.text_hidden, r.i64("text_hidden_size", 1, 65536));
  CHORUS_ASSIGN(t.num_code_groups, r.i64("num_code_groups", 2, 64));
  const int64_t v = t.codec_vocab - 1;
  CHORUS_ASSIGN(t.codec_pad_id, r.i64("codec_pad_id", 0, v));
  CHORUS_ASSIGN(t.codec_bos_id, r.i64("codec_bos_id", 0, v));
  CHORUS_ASSIGN(t.codec_eos_id, r.i64("codec_eos_token_id", 0, v));
  CHORUS_ASSIGN(t.codec_think_id, r.i64("codec_think_id", 0, v));
  CHORUS_ASSIGN(t.codec_nothink_id, r.i64("codec_nothink_id", 0, v));
  CHORUS_ASSIGN(t.codec_think_bos_id, r.i64("codec_think_bos_id", 0, v));
  CHORUS_ASSIGN(t.codec_think_eos_id, r.i64("codec_think_eos_id", 0, v));
  CHORUS_ASSIGN(t.language_ids, r.int_map("codec_language_id", 0, v));
  CHORUS_ASSIGN(t.speaker_ids, r.int_map("spk_id", 0, v));
  return t;
}

// spk_is_dialect: name -> false | "dialect_name"; the dialect must be a known language.
Status parse_dialects(const nlohmann::json& talker_json, const std::string& path, TalkerConfig& t) {
  auto it = talker_json.find("spk_is_dialect");
  if (it == talker_json.end() || it->is_null()) return ok_status();
  if (!it->is_object()) return make_error(ErrorCode::kInvalidFormat, path + ".spk_is_dialect should be an object");
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (e->is_boolean() && !e->get<bool>()) continue;
    if (!e->is_string())
      return make_error(ErrorCode::kInvalidFormat, path + ".spk_is_dialect." + e.key() + " should be false or a dialect name");
    const std::string dialect = e->get<std::string>();
    if (!t.language_ids.count(dialect))
      return make_error(ErrorCode::kInvalidFormat, path + ".spk_is_dialect." + e.key() + " names '" + dialect +
                                                       "', which is not in codec_language_id");
    std::string name = e.key();
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    t.speaker_dialect[name] = dialect;
  }
  return ok_status();
}

Result<SpeakerEncoderConfig> parse_speaker_encoder(const ConfigReader& r, int64_t talker_hidden) {
  SpeakerEncoderConfig s;
  CHORUS_ASSIGN(s.mel_dim, r.i64("mel_dim", 1, 4096, 128));
  CHORUS_ASSIGN(s.enc_dim, r.i64("enc_dim", 1, 65536, 1024));
  CHORUS_ASSIGN(auto ch, r.i64_list("enc_channels", 1, 65536, 5, std::vector<int64_t>{512, 512, 512, 512, 1536}));
  CHORUS_ASSIGN(auto ks, r.i64_list("enc_kernel_sizes", 1, 64, 5, std::vector<int64_t>{5, 3, 3, 3, 1}));
  CHORUS_ASSIGN(auto dl, r.i64_list("enc_dilations", 1, 64, 5, std::vector<int64_t>{1, 2, 3, 4, 1}));
  if (ch.size() != 5 || ks.size() != 5 || dl.size() != 5)
    return make_error(ErrorCode::kInvalidFormat, r.path() + ": enc_channels, enc_kernel_sizes and enc_dilations need 5 entries");
  for (int i = 0; i < 5; ++i) {
    s.channels[i] = ch[i];
    s.kernel_sizes[i] = ks[i];
    s.dilations[i] = dl[i];
  }
  CHORUS_ASSIGN(s.attention_channels, r.i64("enc_attention_channels", 1, 65536, 128));
  CHORUS_ASSIGN(s.res2net_scale, r.i64("enc_res2net_scale", 2, 64, 8));
  CHORUS_ASSIGN(s.se_channels, r.i64("enc_se_channels", 1, 65536, 128));
  CHORUS_ASSIGN(s.sample_rate, r.i64("sample_rate", 8000, 192000, 24000));
  for (int i = 1; i < 4; ++i)
    if (s.channels[i] % s.res2net_scale != 0)
      return make_error(ErrorCode::kInvalidFormat, r.path() + ": enc_channels must be divisible by enc_res2net_scale");
  if (s.enc_dim != talker_hidden)
    return make_error(ErrorCode::kInvalidFormat, r.where("enc_dim") + " = " + std::to_string(s.enc_dim) +
                                                     " must equal the talker hidden size " + std::to_string(talker_hidden));
  return s;
}

}  // namespace

Result<Config> parse_config(const nlohmann::json& root, const std::string& label) {
  ConfigReader r(root, label);
  Config c;
  CHORUS_ASSIGN(auto mt, r.str("model_type"));
  if (mt != "qwen3_tts")
    return make_error(ErrorCode::kUnsupported, label + ": model_type \"" + mt + "\" is not qwen3_tts");
  CHORUS_ASSIGN(auto vt, r.str("tts_model_type"));
  auto variant = variant_from_name(vt);
  if (!variant)
    return make_error(ErrorCode::kUnsupported, label + ": tts_model_type \"" + vt +
                                                   "\" (expected base, custom_voice or voice_design)");
  c.variant = *variant;
  CHORUS_ASSIGN(c.size_label, r.str("tts_model_size", std::string("")));
  CHORUS_ASSIGN(auto tr, r.child("talker_config"));
  CHORUS_ASSIGN(c.talker, parse_talker(tr));
  CHORUS_TRY(parse_dialects(root["talker_config"], tr.path(), c.talker));
  const int64_t tv = c.talker.text_vocab - 1;
  CHORUS_ASSIGN(c.im_start_id, r.i64("im_start_token_id", 0, tv, 151644));
  CHORUS_ASSIGN(c.im_end_id, r.i64("im_end_token_id", 0, tv, 151645));
  CHORUS_ASSIGN(c.tts_pad_id, r.i64("tts_pad_token_id", 0, tv, 151671));
  CHORUS_ASSIGN(c.tts_bos_id, r.i64("tts_bos_token_id", 0, tv, 151672));
  CHORUS_ASSIGN(c.tts_eos_id, r.i64("tts_eos_token_id", 0, tv, 151673));
  CHORUS_ASSIGN(auto cr, tr.child("code_predictor_config"));
  CHORUS_ASSIGN(c.code_predictor.dims, nn::read_qwen3_dims(cr));
  CHORUS_ASSIGN(c.code_predictor.vocab, cr.i64("vocab_size", 2, 1 << 20));
  CHORUS_ASSIGN(c.code_predictor.num_code_groups, cr.i64("num_code_groups", 2, 64, c.talker.num_code_groups));
  if (c.code_predictor.num_code_groups != c.talker.num_code_groups)
    return make_error(ErrorCode::kInvalidFormat, label + ": talker and code predictor disagree on num_code_groups");
  if (c.code_predictor.vocab > c.talker.codec_vocab)
    return make_error(ErrorCode::kInvalidFormat, label + ": code predictor vocabulary exceeds the talker codec vocabulary");
  if (c.talker.codec_eos_id < c.code_predictor.vocab)
    return make_error(ErrorCode::kInvalidFormat, label + ": codec_eos_token_id collides with codebook entries");
  if (c.variant == Variant::kBase) {
    CHORUS_ASSIGN(auto sr, r.child("speaker_encoder_config"));
    CHORUS_ASSIGN(auto se, parse_speaker_encoder(sr, c.talker.dims.hidden));
    c.speaker_encoder = se;
  }
  return c;
}

Result<GenerationDefaults> parse_generation_config(const nlohmann::json& root, const std::string& label) {
  ConfigReader r(root, label);
  GenerationDefaults g;
  CHORUS_ASSIGN(g.do_sample, r.boolean("do_sample", true));
  CHORUS_ASSIGN(g.top_k, r.i64("top_k", 0, 1 << 20, 50));
  CHORUS_ASSIGN(g.top_p, r.f64("top_p", 0.0, 1.0, 1.0));
  CHORUS_ASSIGN(g.temperature, r.f64("temperature", 0.0, 100.0, 0.9));
  CHORUS_ASSIGN(g.repetition_penalty, r.f64("repetition_penalty", 1e-3, 100.0, 1.05));
  CHORUS_ASSIGN(g.sub_do_sample, r.boolean("subtalker_dosample", true));
  CHORUS_ASSIGN(g.sub_top_k, r.i64("subtalker_top_k", 0, 1 << 20, 50));
  CHORUS_ASSIGN(g.sub_top_p, r.f64("subtalker_top_p", 0.0, 1.0, 1.0));
  CHORUS_ASSIGN(g.sub_temperature, r.f64("subtalker_temperature", 0.0, 100.0, 0.9));
  CHORUS_ASSIGN(g.max_new_tokens, r.i64("max_new_tokens", 1, 1 << 20, 2048));
  return g;
}

Result<Config> load_config(const std::string& dir) {
  const auto generation = [](const nlohmann::json& root, const std::string& label, Config& c) -> Status {
    CHORUS_ASSIGN(c.generation, parse_generation_config(root, label));
    return ok_status();
  };
  std::string codec_file;
  CHORUS_ASSIGN(Config c, load_config_folder<Config>(dir, "Qwen3-TTS", "speech_tokenizer", parse_config, generation,
                                                      codec_file));
  if (c.codec.decoder.num_quantizers != c.talker.num_code_groups)
    return make_error(ErrorCode::kInvalidFormat, codec_file + ": the codec has " +
                                                     std::to_string(c.codec.decoder.num_quantizers) +
                                                     " codebooks but the talker predicts " +
                                                     std::to_string(c.talker.num_code_groups));
  if (c.codec.decoder.codebook_size != c.code_predictor.vocab)
    return make_error(ErrorCode::kInvalidFormat, codec_file + ": codebook_size differs from the code predictor vocabulary");
  return c;
}

static nlohmann::json dims_to_json(const nn::Qwen3Dims& d) {
  return {{"hidden_size", d.hidden},       {"intermediate_size", d.intermediate},
          {"num_hidden_layers", d.layers}, {"num_attention_heads", d.heads},
          {"num_key_value_heads", d.kv_heads}, {"head_dim", d.head_dim},
          {"hidden_act", "silu"},          {"max_position_embeddings", d.max_positions},
          {"rms_norm_eps", d.rms_eps},     {"rope_theta", d.rope_theta},
          {"attention_bias", false},       {"use_sliding_window", false},
          {"sliding_window", nullptr},     {"attention_dropout", 0.0},
          {"use_cache", true},             {"tie_word_embeddings", false}};
}

nlohmann::json config_to_json(const Config& c) {
  using nlohmann::json;
  const auto& t = c.talker;
  json talker = dims_to_json(t.dims);
  talker["vocab_size"] = t.codec_vocab;
  // mrope sections in the released proportions ([24, 20, 20] for head_dim 128). Numerically unused:
  // the three position streams are identical for TTS, so this is plain RoPE.
  const int64_t half = t.dims.head_dim / 2, hw = half * 5 / 16;
  talker["rope_scaling"] = {{"interleaved", true}, {"mrope_section", {half - 2 * hw, hw, hw}}, {"rope_type", "default"}};
  talker["num_code_groups"] = t.num_code_groups;
  talker["text_vocab_size"] = t.text_vocab;
  talker["text_hidden_size"] = t.text_hidden;
  talker["codec_pad_id"] = t.codec_pad_id;
  talker["codec_bos_id"] = t.codec_bos_id;
  talker["codec_eos_token_id"] = t.codec_eos_id;
  talker["codec_think_id"] = t.codec_think_id;
  talker["codec_nothink_id"] = t.codec_nothink_id;
  talker["codec_think_bos_id"] = t.codec_think_bos_id;
  talker["codec_think_eos_id"] = t.codec_think_eos_id;
  talker["codec_language_id"] = t.language_ids;
  talker["spk_id"] = json::object();
  for (const auto& [k, v] : t.speaker_ids) talker["spk_id"][k] = v;
  talker["spk_is_dialect"] = json::object();
  for (const auto& [k, v] : t.speaker_ids) {
    auto it = t.speaker_dialect.find(k);
    if (it == t.speaker_dialect.end()) talker["spk_is_dialect"][k] = false;
    else talker["spk_is_dialect"][k] = it->second;
  }
  talker["position_id_per_seconds"] = 13;
  json cp = dims_to_json(c.code_predictor.dims);
  cp["vocab_size"] = c.code_predictor.vocab;
  cp["num_code_groups"] = c.code_predictor.num_code_groups;
  cp["rope_scaling"] = nullptr;
  cp["layer_types"] = std::vector<std::string>(c.code_predictor.dims.layers, "full_attention");
  talker["code_predictor_config"] = cp;
  json root = {{"architectures", {"Qwen3TTSForConditionalGeneration"}},
               {"model_type", "qwen3_tts"},
               {"tokenizer_type", "qwen3_tts_tokenizer_12hz"},
               {"tts_model_size", c.size_label},
               {"tts_model_type", variant_name(c.variant)},
               {"im_start_token_id", c.im_start_id},
               {"im_end_token_id", c.im_end_id},
               {"tts_pad_token_id", c.tts_pad_id},
               {"tts_bos_token_id", c.tts_bos_id},
               {"tts_eos_token_id", c.tts_eos_id},
               {"assistant_token_id", 77091},
               {"talker_config", talker}};
  if (c.speaker_encoder) {
    const auto& s = *c.speaker_encoder;
    root["speaker_encoder_config"] = {
        {"mel_dim", s.mel_dim},
        {"enc_dim", s.enc_dim},
        {"enc_channels", std::vector<int64_t>(s.channels, s.channels + 5)},
        {"enc_kernel_sizes", std::vector<int64_t>(s.kernel_sizes, s.kernel_sizes + 5)},
        {"enc_dilations", std::vector<int64_t>(s.dilations, s.dilations + 5)},
        {"enc_attention_channels", s.attention_channels},
        {"enc_res2net_scale", s.res2net_scale},
        {"enc_se_channels", s.se_channels},
        {"sample_rate", s.sample_rate}};
  }
  root["torch_dtype"] = "bfloat16";
  return root;
}

nlohmann::json generation_to_json(const GenerationDefaults& g) {
  nlohmann::json j = nlohmann::json::object();
  io::put_sampler_keys(j, "do_sample", "", g.do_sample, g.temperature, g.top_k, g.top_p);
  io::put_sampler_keys(j, "subtalker_dosample", "subtalker_", g.sub_do_sample, g.sub_temperature, g.sub_top_k,
                       g.sub_top_p);
  j["repetition_penalty"] = g.repetition_penalty;
  j["max_new_tokens"] = g.max_new_tokens;
  return j;
}

}  // namespace chorus::qwen3_tts
