// Config parsing and checkpoint validation for Qwen3-TTS folders: the reference tiny models load
// with every tensor matching the weight tables; hostile or inconsistent configs and tensors give a
// specific error that names the key or tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/json_util.h"
#include "io/safetensors.h"
#include "models/codec/weights.h"
#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/presets.h"
#include "models/qwen3_tts/weights.h"
#include "models/random_weights.h"
#include "support/test_support.h"

namespace chorus::qwen3_tts {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const std::string& path) {
  auto j = io::read_json_file(path);
  EXPECT_TRUE(j.ok()) << path;
  return j.ok() ? *j : nlohmann::json();
}

TEST(Qwen3Config, ReferenceTinyModelsLoadAndMatchTheManifest) {
  const auto manifest = read_json(test::reference_path("qwen3_tts/manifest.json"));
  for (const char* v : {"custom_voice", "voice_design", "base"}) {
    const std::string dir = test::reference_path(std::string("qwen3_tts/models/tiny_") + v);
    auto m = open_model_files(dir);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    EXPECT_STREQ(variant_name(m->config.variant), v);
    // Parameter counts recorded by the official harness (independent of our weight tables).
    EXPECT_EQ(m->main_params, manifest["models"][v]["main_params"].get<int64_t>()) << v;
    EXPECT_EQ(m->main.names().size(), manifest["models"][v]["main_tensors"].get<size_t>()) << v;
    EXPECT_EQ(m->codec.names().size(), manifest["models"][v]["speech_tokenizer_tensors"].get<size_t>()) << v;
    EXPECT_TRUE(m->unexpected_main.empty()) << v << ": " << m->unexpected_main.front();
    EXPECT_TRUE(m->unexpected_codec.empty()) << v;
    EXPECT_TRUE(m->codec_has_encoder);
    // Every tensor the table declares is used, and the table's size equals the file's.
    EXPECT_EQ(main_weight_table(m->config).total_params(), m->main_params) << v;
  }
  auto cv = open_model_files(test::reference_path("qwen3_tts/models/tiny_custom_voice"));
  ASSERT_TRUE(cv.ok());
  EXPECT_EQ(cv->config.talker.speaker_ids.at("ryan"), 3061);
  EXPECT_EQ(cv->config.talker.speaker_dialect.at("eric"), "sichuan_dialect");
  EXPECT_EQ(cv->config.talker.speaker_dialect.count("ryan"), 0u);
  EXPECT_EQ(cv->config.tts_pad_id, 1010);
  EXPECT_EQ(cv->config.generation.top_k, 50);
  EXPECT_DOUBLE_EQ(cv->config.generation.repetition_penalty, 1.05);
}

TEST(Qwen3Config, MakeTinyRoundTripsForEveryVariantAndIsDeterministic) {
  for (Variant v : {Variant::kCustomVoice, Variant::kVoiceDesign, Variant::kBase}) {
    const Config c = preset_config(v, Dims::kTiny);
    const std::string dir = test::scratch_dir(std::string("make_tiny_") + variant_name(v));
    ASSERT_TRUE(write_random_model(dir, c, 7).ok());
    auto m = open_model_files(dir);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    EXPECT_EQ(config_to_json(m->config), config_to_json(c));
    EXPECT_EQ(generation_to_json(m->config.generation), generation_to_json(c.generation));
    EXPECT_EQ(codec::codec_config_to_json(m->config.codec), codec::codec_config_to_json(c.codec));
    EXPECT_TRUE(fs::exists(fs::path(dir) / "vocab.json"));
    // Same seed, same bytes; another seed, other weights.
    const std::string again = test::scratch_dir(std::string("make_tiny_again_") + variant_name(v));
    ASSERT_TRUE(write_random_model(again, c, 7).ok());
    auto read = [](const fs::path& p) {
      std::ifstream in(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    EXPECT_EQ(read(fs::path(dir) / "model.safetensors"), read(fs::path(again) / "model.safetensors"));
    const std::string other = test::scratch_dir(std::string("make_tiny_other_") + variant_name(v));
    ASSERT_TRUE(write_random_model(other, c, 8).ok());
    EXPECT_NE(read(fs::path(dir) / "model.safetensors"), read(fs::path(other) / "model.safetensors"));
  }
}

TEST(Qwen3Config, RandomWeightsAreNotDegenerate) {
  // Heads that a real model zero-initialises must be random here, or tests would compare zeros.
  const Config c = preset_config(Variant::kBase, Dims::kTiny);
  for (const auto& t : random_weights(main_weight_table(c), 1, DType::kF32)) {
    double sum_sq = 0;
    for (int64_t i = 0; i < t.tensor.numel(); ++i) sum_sq += double(t.tensor.f32()[i]) * t.tensor.f32()[i];
    EXPECT_GT(sum_sq / t.tensor.numel(), 1e-6) << t.name;
    if (t.tensor.numel() > 16) {
      EXPECT_NE(t.tensor.f32()[0], t.tensor.f32()[1]) << t.name;
    }
  }
}

// Writes the reference tiny custom_voice folder with config.json edited by `edit`.
std::string edited_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string src = test::reference_path("qwen3_tts/models/tiny_custom_voice");
  const std::string dir = test::scratch_dir("edited_" + name);
  fs::copy(src, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  for (auto& e : fs::recursive_directory_iterator(dir)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
  auto j = read_json(src + "/config.json");
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump();
  return dir;
}

struct BadConfig {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  ErrorCode code;
  const char* message;
};

TEST(Qwen3Config, HostileConfigValuesGiveSpecificErrors) {
  const std::vector<BadConfig> cases = {
      {"layers_huge", [](auto& j) { j["talker_config"]["num_hidden_layers"] = 1000000000; }, ErrorCode::kOutOfRange,
       "talker_config.num_hidden_layers"},
      {"layers_zero", [](auto& j) { j["talker_config"]["num_hidden_layers"] = 0; }, ErrorCode::kOutOfRange,
       "num_hidden_layers"},
      {"hidden_negative", [](auto& j) { j["talker_config"]["hidden_size"] = -32; }, ErrorCode::kOutOfRange, "hidden_size"},
      {"hidden_string", [](auto& j) { j["talker_config"]["hidden_size"] = "32"; }, ErrorCode::kInvalidFormat, "hidden_size"},
      {"hidden_fraction", [](auto& j) { j["talker_config"]["hidden_size"] = 32.5; }, ErrorCode::kOutOfRange, "hidden_size"},
      {"gqa_mismatch", [](auto& j) { j["talker_config"]["num_key_value_heads"] = 3; }, ErrorCode::kInvalidFormat,
       "num_key_value_heads"},
      {"odd_head_dim", [](auto& j) { j["talker_config"]["head_dim"] = 15; }, ErrorCode::kInvalidFormat, "head_dim"},
      {"eos_outside_vocab", [](auto& j) { j["talker_config"]["codec_eos_token_id"] = 5000; }, ErrorCode::kOutOfRange,
       "codec_eos_token_id"},
      {"eos_inside_codebook", [](auto& j) { j["talker_config"]["codec_eos_token_id"] = 100; }, ErrorCode::kInvalidFormat,
       "collides"},
      {"speaker_outside_vocab", [](auto& j) { j["talker_config"]["spk_id"]["ryan"] = 99999; }, ErrorCode::kOutOfRange,
       "spk_id.ryan"},
      {"dialect_unknown", [](auto& j) { j["talker_config"]["spk_is_dialect"]["ryan"] = "klingon"; },
       ErrorCode::kInvalidFormat, "klingon"},
      {"pad_outside_text_vocab", [](auto& j) { j["tts_pad_token_id"] = 1 << 30; }, ErrorCode::kOutOfRange, "tts_pad_token_id"},
      {"wrong_model_type", [](auto& j) { j["model_type"] = "llama"; }, ErrorCode::kUnsupported, "model_type"},
      {"wrong_variant", [](auto& j) { j["tts_model_type"] = "karaoke"; }, ErrorCode::kUnsupported, "tts_model_type"},
      {"missing_talker", [](auto& j) { j.erase("talker_config"); }, ErrorCode::kInvalidFormat, "talker_config"},
      {"code_groups_disagree", [](auto& j) { j["talker_config"]["code_predictor_config"]["num_code_groups"] = 8; },
       ErrorCode::kInvalidFormat, "num_code_groups"},
      {"eps_nan_like", [](auto& j) { j["talker_config"]["rms_norm_eps"] = 5.0; }, ErrorCode::kOutOfRange, "rms_norm_eps"},
  };
  for (const auto& c : cases) {
    auto m = open_model_files(edited_copy(c.name, c.edit));
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.error().code, c.code) << c.name << ": " << m.error().to_string();
    EXPECT_NE(m.error().message.find(c.message), std::string::npos) << c.name << ": " << m.error().to_string();
  }
}

TEST(Qwen3Config, ConfigShapesThatDisagreeWithTensorsNameTheTensor) {
  // The config is valid but implies other shapes than the file holds.
  auto m = open_model_files(edited_copy("wider", [](auto& j) { j["talker_config"]["intermediate_size"] = 96; }));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kShapeMismatch);
  EXPECT_NE(m.error().message.find("talker.model.layers.0.mlp.gate_proj.weight"), std::string::npos) << m.error().message;
  EXPECT_NE(m.error().message.find("[96, 32]"), std::string::npos) << m.error().message;
}

TEST(Qwen3Config, MissingOrMistypedTensorsAreReportedByName) {
  const Config c = preset_config(Variant::kCustomVoice, Dims::kTiny);
  const WeightTable table = main_weight_table(c);
  auto tensors = random_weights(table, 3, DType::kBF16);
  const std::string dir = test::scratch_dir("bad_tensors");
  ASSERT_TRUE(write_random_model(dir, c, 3).ok());

  auto missing = tensors;
  missing.erase(missing.begin() + 5);
  ASSERT_TRUE(io::write_safetensors(dir + "/model.safetensors", missing).ok());
  auto m = open_model_files(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kNotFound);
  EXPECT_NE(m.error().message.find(tensors[5].name), std::string::npos) << m.error().message;

  auto wrong_dtype = tensors;
  wrong_dtype[2].tensor = Tensor::zeros(DType::kI32, wrong_dtype[2].tensor.shape());
  ASSERT_TRUE(io::write_safetensors(dir + "/model.safetensors", wrong_dtype).ok());
  m = open_model_files(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, ErrorCode::kShapeMismatch);
  EXPECT_NE(m.error().message.find("I32"), std::string::npos) << m.error().message;
}

TEST(CodecConfig, UpsamplingMustMatchTheFrameSize) {
  auto j = read_json(test::reference_path("qwen3_tts/models/tiny_base/speech_tokenizer/config.json"));
  ASSERT_TRUE(codec::parse_codec_config(j, "c.json").ok());
  j["decoder_config"]["upsample_rates"] = {8, 5, 4, 4};
  auto c = codec::parse_codec_config(j, "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("decode_upsample_rate"), std::string::npos);
  j["decoder_config"]["upsample_rates"] = nlohmann::json::array();
  EXPECT_FALSE(codec::parse_codec_config(j, "c.json").ok());
}

}  // namespace
}  // namespace chorus::qwen3_tts
