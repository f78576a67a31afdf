// Breeze TTS 2 config parsing: the tiny reference checkpoint's config.json (expected values from the
// reference README and manifest.json, not from our code), the nested-over-top-level rule, the
// fallbacks for older key layouts, and rejection of bad values with messages that name the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/presets.h"
#include "models/codec/codec_config.h"

namespace chorus::breeze_tts {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

json tiny_config_json() { return read_json(test::tiny_model_dir() + "/config.json"); }

TEST(BreezeConfig, TinyReferenceConfigHasTheReadmeDimensions) {
  auto c = load_config(test::tiny_model_dir());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  // README "The tiny model" table.
  const auto& te = c->text_encoder;
  EXPECT_EQ(te.hidden, 72);
  EXPECT_EQ(te.layers, 2);
  ASSERT_EQ(te.layer_types.size(), 2u);
  EXPECT_EQ(te.layer_types[0], TextLayerType::kSliding);
  EXPECT_EQ(te.layer_types[1], TextLayerType::kFull);
  EXPECT_EQ(te.heads, 4);
  EXPECT_EQ(te.kv_heads, 1);
  EXPECT_EQ(te.head_dim, 24);
  EXPECT_EQ(te.intermediate, 144);
  EXPECT_EQ(te.query_pre_attn_scalar, 32.0);
  EXPECT_EQ(te.sliding_window, 8);
  EXPECT_EQ(te.rope_sliding.theta, 1e4);
  EXPECT_EQ(te.rope_sliding.linear_factor, 1.0);
  EXPECT_EQ(te.rope_full.theta, 1e6);
  EXPECT_EQ(te.rope_full.linear_factor, 8.0);
  EXPECT_EQ(te.rms_eps, 1e-6);
  EXPECT_EQ(c->hidden, 64);
  const auto& b = c->backbone.dims;
  EXPECT_EQ(b.hidden, 64);
  EXPECT_EQ(b.layers, 2);
  EXPECT_EQ(b.heads, 4);
  EXPECT_EQ(b.kv_heads, 2);
  EXPECT_EQ(b.head_dim, 16);
  EXPECT_EQ(b.intermediate, 128);
  // Nested values, not the top-level decoys (rope_theta 500000, rms_norm_eps 1e-5).
  EXPECT_EQ(b.rope_theta, 1e6);
  EXPECT_EQ(b.rms_eps, 1e-6);
  const auto& d = c->depth;
  EXPECT_EQ(d.dims.hidden, 48);
  EXPECT_EQ(d.dims.layers, 2);
  EXPECT_EQ(d.dims.heads, 4);
  EXPECT_EQ(d.dims.kv_heads, 1);
  EXPECT_EQ(d.dims.head_dim, 12);
  EXPECT_EQ(d.dims.intermediate, 96);
  EXPECT_EQ(d.dims.rms_eps, 1e-5);
  EXPECT_EQ(d.dims.rope_theta, 5e5);
  EXPECT_EQ(d.dims.max_positions, 33);
  ASSERT_TRUE(d.rope_scaling.enabled);
  EXPECT_EQ(d.rope_scaling.factor, 32.0);
  EXPECT_EQ(d.rope_scaling.low_freq_factor, 1.0 / 512);
  EXPECT_EQ(d.rope_scaling.high_freq_factor, 1.0 / 128);
  EXPECT_EQ(d.rope_scaling.original_max_positions, 16);
  EXPECT_EQ(c->num_codebooks, 16);
  EXPECT_EQ(c->audio_vocab, 2051);
  EXPECT_EQ(c->lm_head_rows(), 2052);
  EXPECT_EQ(c->backbone_eos(), 2051);
  EXPECT_EQ(c->codec_codebook_size, 2048);
  EXPECT_EQ(c->ids.codebook_pad, 2050);
  EXPECT_EQ(c->ids.codebook_eos, 0);
  EXPECT_EQ(c->sample_rate, 24000);
  // generation_config.json plus upstream's fixed penalty.
  const auto& g = c->generation;
  EXPECT_TRUE(g.do_sample);
  EXPECT_EQ(g.temperature, 0.9);
  EXPECT_EQ(g.top_k, 50);
  EXPECT_EQ(g.top_p, 1.0);
  EXPECT_EQ(g.depth_temperature, 0.9);
  EXPECT_EQ(g.depth_top_k, 50);
  EXPECT_EQ(g.config_max_new_tokens, 750);
  EXPECT_EQ(g.repetition_penalty, 1.1);
  // The codec is the Qwen3-TTS tiny one.
  EXPECT_EQ(c->codec.decoder.num_quantizers, 16);
  EXPECT_TRUE(c->codec.encoder.present);
}

TEST(BreezeConfig, SpecialIdsMatchTheManifest) {
  auto c = load_config(test::tiny_model_dir());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  const json m = read_json(chorus::test::reference_path("breeze_tts2/manifest.json"))["special_ids"];
  EXPECT_EQ(c->ids.pad, m["pad"].get<int64_t>());
  EXPECT_EQ(c->ids.eos, m["eos"].get<int64_t>());
  EXPECT_EQ(c->ids.bos, m["bos"].get<int64_t>());
  EXPECT_EQ(c->ids.audio, m["audio"].get<int64_t>());
  EXPECT_EQ(c->ids.audio_eos, m["audio_eos"].get<int64_t>());
  EXPECT_EQ(c->ids.speakers, m["speakers"].get<std::vector<int64_t>>());
  EXPECT_EQ(c->ids.ins_bos, m["ins_bos"].get<int64_t>());
  EXPECT_EQ(c->ids.ins_eos, m["ins_eos"].get<int64_t>());
  EXPECT_EQ(c->text_vocab, m["vocab"].get<int64_t>());
  EXPECT_EQ(c->text_encoder.eoi_token_id, m["eoi"].get<int64_t>());
}

TEST(BreezeConfig, TinyPresetEqualsTheReferenceConfig) {
  auto ref = load_config(test::tiny_model_dir());
  ASSERT_TRUE(ref.ok()) << ref.error().to_string();
  const Config tiny = preset_config(Dims::kTiny);
  EXPECT_EQ(config_to_json(tiny).dump(1), config_to_json(*ref).dump(1));
  EXPECT_EQ(generation_to_json(tiny.generation).dump(), generation_to_json(ref->generation).dump());
  EXPECT_EQ(codec::codec_config_to_json(tiny.codec).dump(1), codec::codec_config_to_json(ref->codec).dump(1));
}

TEST(BreezeConfig, OurJsonParsesBackToTheSameConfig) {
  for (Dims dims : {Dims::kTiny, Dims::kReal}) {
    const Config c = preset_config(dims);
    const json j = config_to_json(c);
    auto back = parse_config(j, "roundtrip");
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(config_to_json(*back).dump(), j.dump());
  }
}

TEST(BreezeConfig, RealPresetHasTheReleasedShape) {
  const Config c = preset_config(Dims::kReal);  // spec §2
  EXPECT_EQ(c.text_vocab, 262158);
  EXPECT_EQ(c.ids.audio, 262144);
  EXPECT_EQ(c.ids.speakers.front(), 262146);
  EXPECT_EQ(c.ids.ins_eos, 262157);
  std::vector<int64_t> full;
  for (size_t i = 0; i < c.text_encoder.layer_types.size(); ++i)
    if (c.text_encoder.layer_types[i] == TextLayerType::kFull) full.push_back(static_cast<int64_t>(i));
  EXPECT_EQ(full, (std::vector<int64_t>{5, 11, 17, 23}));
  EXPECT_EQ(c.backbone.dims.layers, 28);
  EXPECT_EQ(c.depth.dims.layers, 12);
}

TEST(BreezeConfig, AudioAliasesWinOverAStrayQwenVocab) {
  json j = tiny_config_json();
  j["vocab_size"] = 151936;
  j["audio_vocab_size"] = 2051;
  j["num_codebooks"] = 8;
  j["audio_num_codebooks"] = 16;
  j["hidden_size"] = 999;  // a decoy: the backbone width comes from backbone_config
  auto c = parse_config(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->audio_vocab, 2051);
  EXPECT_EQ(c->num_codebooks, 16);
  EXPECT_EQ(c->hidden, 64);
}

TEST(BreezeConfig, OlderGemmaKeyLayoutsAreUnderstood) {
  json j = tiny_config_json();
  auto& te = j["text_encoder_config"];
  te.erase("layer_types");
  te["num_hidden_layers"] = 12;  // every 6th layer global by default
  te.erase("rope_parameters");
  te["rope_local_base_freq"] = 10000.0;
  te["rope_theta"] = 1000000.0;
  te["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  auto c = parse_config(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  std::vector<TextLayerType> want(12, TextLayerType::kSliding);
  want[5] = want[11] = TextLayerType::kFull;
  EXPECT_EQ(c->text_encoder.layer_types, want);
  EXPECT_EQ(c->text_encoder.rope_full.theta, 1e6);
  EXPECT_EQ(c->text_encoder.rope_full.linear_factor, 8.0);
  EXPECT_EQ(c->text_encoder.rope_sliding.theta, 1e4);
}

struct BadCase {
  const char* pointer;  // JSON pointer of the value to replace ("" value = remove)
  json value;
  ErrorCode code;
  const char* mention;  // a substring the message must contain
};

TEST(BreezeConfig, BadValuesAreRejectedWithTheKeyNamed) {
  const std::vector<BadCase> cases = {
      {"/model_type", "qwen3_tts", ErrorCode::kUnsupported, "model_type"},
      {"/backbone_model_type", "llama", ErrorCode::kUnsupported, "backbone_model_type"},
      {"/backbone_config", nullptr, ErrorCode::kInvalidFormat, "backbone_config"},
      {"/backbone_config/num_attention_heads", 3, ErrorCode::kInvalidFormat, "num_key_value_heads"},
      {"/backbone_config/num_hidden_layers", 1000000000, ErrorCode::kOutOfRange, "backbone_config.num_hidden_layers"},
      {"/backbone_config/rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}},
       ErrorCode::kUnsupported, "backbone_config.rope_scaling"},
      {"/backbone_config/use_sliding_window", true, ErrorCode::kUnsupported, "use_sliding_window"},
      {"/text_encoder_config/head_dim", "24", ErrorCode::kInvalidFormat, "text_encoder_config.head_dim"},
      {"/text_encoder_config/layer_types", {"sliding_attention"}, ErrorCode::kInvalidFormat, "layer_types"},
      {"/text_encoder_config/layer_types/0", "chunked_attention", ErrorCode::kInvalidFormat, "layer_types[0]"},
      {"/text_encoder_config/hidden_activation", "relu", ErrorCode::kUnsupported, "hidden_activation"},
      {"/text_encoder_config/attn_logit_softcapping", 50.0, ErrorCode::kUnsupported, "attn_logit_softcapping"},
      {"/text_encoder_config/rope_parameters/full_attention/rope_type", "yarn", ErrorCode::kUnsupported, "rope_type"},
      {"/text_encoder_config/num_key_value_heads", 3, ErrorCode::kInvalidFormat, "num_key_value_heads"},
      {"/text_encoder_config/eoi_token_index", 512, ErrorCode::kOutOfRange, "eoi_token_index"},
      {"/depth_decoder_config/rope_scaling/rope_type", "yarn", ErrorCode::kUnsupported, "rope_scaling.rope_type"},
      {"/depth_decoder_config/rope_scaling/low_freq_factor", 0.5, ErrorCode::kInvalidFormat, "low_freq_factor"},
      {"/depth_decoder_config/vocab_size", 2050, ErrorCode::kInvalidFormat, "depth_decoder_config.vocab_size"},
      {"/depth_decoder_config/num_codebooks", 8, ErrorCode::kInvalidFormat, "depth_decoder_config.num_codebooks"},
      {"/depth_decoder_config/backbone_hidden_size", 32, ErrorCode::kInvalidFormat, "backbone_hidden_size"},
      {"/depth_decoder_config/max_position_embeddings", 8, ErrorCode::kInvalidFormat, "max_position_embeddings"},
      {"/audio_embed_size", 32, ErrorCode::kUnsupported, "audio_embed_size"},
      {"/audio_token_id", 600, ErrorCode::kOutOfRange, "audio_token_id"},
      {"/text_encoder_special_tokens_config/token_ids/<ins_bos>", 500, ErrorCode::kInvalidFormat, "used twice"},
      {"/text_encoder_special_tokens_config/token_ids/[S3]", -1, ErrorCode::kOutOfRange, "[S3]"},
      {"/codebook_pad_token_id", 5, ErrorCode::kOutOfRange, "codebook_pad_token_id"},
      {"/codebook_eos_token_id", 2049, ErrorCode::kOutOfRange, "codebook_eos_token_id"},
      {"/codec_config/codebook_size", 4096, ErrorCode::kInvalidFormat, "codebook_size"},
      {"/tie_codebooks_embeddings", false, ErrorCode::kUnsupported, "tie_codebooks_embeddings"},
      {"/text_encoder_feature_layer_idx", -2, ErrorCode::kUnsupported, "text_encoder_feature_layer_idx"},
      {"/text_encoder_proj_type", "mlp", ErrorCode::kUnsupported, "text_encoder_proj_type"},
      {"/vocab_size", 1e30, ErrorCode::kOutOfRange, "vocab_size"},
      {"/vocab_size", "2051", ErrorCode::kInvalidFormat, "vocab_size"},
  };
  for (const auto& bc : cases) {
    SCOPED_TRACE(bc.pointer);
    json j = tiny_config_json();
    const json::json_pointer ptr(bc.pointer);
    ASSERT_TRUE(j.contains(ptr) || bc.value.is_null() == false) << "test setup: " << bc.pointer;
    if (bc.value.is_null()) j.at(ptr.parent_pointer()).erase(ptr.back());
    else j[ptr] = bc.value;
    auto c = parse_config(j, "config.json");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(error_code_name(c.error().code), std::string(error_code_name(bc.code))) << c.error().to_string();
    EXPECT_NE(c.error().message.find(bc.mention), std::string::npos) << c.error().to_string();
  }
}

TEST(BreezeConfig, BadGenerationValuesAreRejected) {
  GenerationDefaults g;
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"temperature", -1.0}, {"top_p", 2.0}, {"depth_decoder_top_k", -5}, {"do_sample", "yes"},
           {"max_new_tokens", 0}, {"repetition_penalty", 0.0}}) {
    SCOPED_TRACE(key);
    const json j = {{key, value}};
    auto st = parse_generation_config(j, "generation_config.json", g);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message.find(key), std::string::npos) << st.error().to_string();
  }
}

TEST(BreezeConfig, CodecMustAgreeWithTheModel) {
  const std::string dir = chorus::test::scratch_dir("breeze_codec_mismatch");
  namespace fs = std::filesystem;
  fs::create_directories(dir + "/audio_tokenizer");
  std::ofstream(dir + "/config.json") << tiny_config_json().dump();
  json codec = read_json(test::tiny_model_dir() + "/audio_tokenizer/config.json");
  codec["decoder_config"]["codebook_size"] = 1024;
  std::ofstream(dir + "/audio_tokenizer/config.json") << codec.dump();
  auto c = load_config(dir);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("codebook_size"), std::string::npos) << c.error().to_string();
  fs::remove(dir + "/audio_tokenizer/config.json");
  auto missing = load_config(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace chorus::breeze_tts
