// The Breeze weight table against the tiny reference checkpoint (written by the upstream PyTorch
// classes), planted shape/name errors, the real architecture's tensor counts and parameter totals
// from the spec, and make-tiny's round trip.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/presets.h"
#include "models/breeze_tts/tokenizer.h"
#include "models/breeze_tts/weights.h"

namespace chorus::breeze_tts {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// name -> shape straight from a safetensors header, read with the plain JSON parser.
std::map<std::string, Shape> header_shapes(const std::string& path) {
  const std::string raw = slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  std::map<std::string, Shape> out;
  const nlohmann::json header = nlohmann::json::parse(raw.substr(8, n));
  for (const auto& [name, entry] : header.items())
    if (name != "__metadata__") out[name] = entry["shape"].get<Shape>();
  return out;
}

TEST(BreezeWeights, EveryTensorOfTheTinyReferenceMatchesTheTable) {
  auto files = open_model_files(test::tiny_model_dir());
  ASSERT_TRUE(files.ok()) << files.error().to_string();
  const WeightTable table = main_weight_table(files->config);
  const auto header = header_shapes(test::tiny_model_dir() + "/model.safetensors");
  ASSERT_EQ(header.size(), 283u);  // README: 283 tensors
  size_t matched = 0, dead_codec = 0;
  for (const auto& [name, shape] : header) {
    if (name.rfind("codec_model.", 0) == 0) {
      ++dead_codec;
      continue;
    }
    const WeightSpec* spec = table.find(name);
    ASSERT_NE(spec, nullptr) << name << " is not in the table";
    EXPECT_EQ(spec->shape, shape) << name;
    ++matched;
  }
  EXPECT_EQ(dead_codec, 206u);  // README: 206 dead Mimi tensors
  // Every required spec was present (the check above passed), and nothing else is unexplained.
  EXPECT_EQ(files->unexpected_main.size(), dead_codec);
  for (const auto& n : files->unexpected_main) EXPECT_EQ(n.rfind("codec_model.", 0), 0u) << n;
  size_t required = 0;
  for (const auto& s : table.specs()) required += !s.optional;
  EXPECT_EQ(matched, required + 1);  // + the dead embed_text_tokens, declared optional
  EXPECT_TRUE(files->codec_has_encoder);
  EXPECT_TRUE(files->unexpected_codec.empty());
  EXPECT_TRUE(files->tokenizer_path.empty());  // the reference ships none
}

TEST(BreezeWeights, TheTiedAudioTableIsAbsentAndOptional) {
  auto files = open_model_files(test::tiny_model_dir());
  ASSERT_TRUE(files.ok()) << files.error().to_string();
  EXPECT_EQ(files->main.find("backbone_model.embed_tokens.embed_audio_tokens.weight"), nullptr);
  EXPECT_NE(files->main.find(kAudioTable), nullptr);
  // The codebooks head keeps its [head, in, out] layout.
  EXPECT_EQ(files->main.find(kCodebooksHead)->shape, (Shape{15, 48, 2051}));
}

// Writes a copy of the tiny model whose main file is `tensors` (config and codec copied).
std::string copy_with(const std::string& name, const std::vector<io::TensorToWrite>& tensors) {
  const std::string dir = chorus::test::scratch_dir(name);
  fs::copy(test::tiny_model_dir() + "/config.json", dir + "/config.json");
  fs::copy(test::tiny_model_dir() + "/audio_tokenizer", dir + "/audio_tokenizer");
  EXPECT_TRUE(io::write_safetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

std::vector<io::TensorToWrite> reference_tensors() {
  auto ckpt = io::Checkpoint::open_dir(test::tiny_model_dir());
  EXPECT_TRUE(ckpt.ok());
  std::vector<io::TensorToWrite> out;
  for (const auto& n : ckpt->names()) out.push_back({n, ckpt->tensor(n)});
  return out;
}

TEST(BreezeWeights, PlantedWrongShapeAndMissingTensorAreNamed) {
  auto tensors = reference_tensors();
  ASSERT_FALSE(tensors.empty());
  // The text encoder's k_proj of layer 1 with one row too many.
  const std::string victim = "text_encoder.layers.1.self_attn.k_proj.weight";
  for (auto& t : tensors)
    if (t.name == victim) t.tensor = Tensor::zeros(DType::kBF16, {25, 72});
  auto bad_shape = open_model_files(copy_with("breeze_bad_shape", tensors));
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_EQ(bad_shape.error().code, ErrorCode::kShapeMismatch);
  EXPECT_NE(bad_shape.error().message.find(victim), std::string::npos) << bad_shape.error().to_string();

  tensors = reference_tensors();
  std::erase_if(tensors, [](const io::TensorToWrite& t) { return t.name == kLmHead; });
  auto missing = open_model_files(copy_with("breeze_missing", tensors));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find(kLmHead), std::string::npos) << missing.error().to_string();

  tensors = reference_tensors();
  for (auto& t : tensors)
    if (t.name == kCodebooksHead) t.tensor = Tensor::zeros(DType::kI32, {15, 48, 2051});
  auto bad_dtype = open_model_files(copy_with("breeze_bad_dtype", tensors));
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.error().message.find("dtype"), std::string::npos) << bad_dtype.error().to_string();
}

TEST(BreezeWeights, RealArchitectureHasTheSpecsTensorCountsAndParameters) {
  const Config c = preset_config(Dims::kReal);
  const WeightTable t = main_weight_table(c);
  // Spec §3.1: 342 text-encoder tensors (projection included), 309 backbone + lm_head, 112 depth,
  // plus the dead text table; 1115 in the release with the 350 dead codec_model tensors.
  size_t text = 0, backbone = 0, depth = 0, other = 0;
  int64_t text_layer_params = 0, backbone_layer_params = 0, depth_layer_params = 0;
  for (const auto& s : t.specs()) {
    if (s.name == "backbone_model.embed_tokens.embed_audio_tokens.weight") continue;  // absent in the release
    const int64_t n = shape_numel(s.shape);
    if (s.name.rfind("text_encoder", 0) == 0) ++text;
    else if (s.name.rfind("backbone_model.", 0) == 0) ++backbone;
    else if (s.name.rfind("depth_decoder.", 0) == 0) ++depth;
    else ++other;
    if (s.name.rfind("text_encoder.layers.", 0) == 0) text_layer_params += n;
    if (s.name.rfind("backbone_model.layers.", 0) == 0) backbone_layer_params += n;
    if (s.name.rfind("depth_decoder.model.layers.", 0) == 0) depth_layer_params += n;
  }
  EXPECT_EQ(text, 342u);
  EXPECT_EQ(backbone, 309u);
  EXPECT_EQ(depth, 112u);
  EXPECT_EQ(other, 2u);  // lm_head, embed_text_tokens
  EXPECT_EQ(text + backbone + depth + other + 350, 1115u);
  // "text layers 26 x 26.84 M = 697.9 M; backbone layers 28 x 50.33 M = 1409.4 M; depth 12 x 27.79 M = 333.5 M"
  EXPECT_NEAR(text_layer_params / 1e6, 697.9, 0.05);
  EXPECT_NEAR(backbone_layer_params / 1e6, 1409.4, 0.05);
  EXPECT_NEAR(depth_layer_params / 1e6, 333.5, 0.05);
  // "Live parameters: about 2.85 B. The checkpoint holds 3,466,363,713 params in total", of which
  // the dead Mimi codec_model.* tensors are 79.3 M.
  int64_t live = 0, with_dead_text = 0;
  for (const auto& s : t.specs()) {
    if (!s.optional) live += shape_numel(s.shape);
    if (!s.optional || s.name == "embed_text_tokens.weight") with_dead_text += shape_numel(s.shape);
  }
  EXPECT_NEAR(live / 1e9, 2.85, 0.005);
  EXPECT_NEAR((3466363713 - with_dead_text) / 1e6, 79.3, 0.05);
  EXPECT_EQ(t.find(kCodebooksHead)->shape, (Shape{15, 1024, 2051}));
  EXPECT_EQ(t.find(kLmHead)->shape, (Shape{2052, 2048}));
  EXPECT_EQ(t.find(kAudioTable)->shape, (Shape{32816, 2048}));
  EXPECT_EQ(t.find("text_encoder.embed_tokens.weight")->shape, (Shape{262158, 1152}));
}

TEST(BreezeWeights, MakeTinyRoundTripsAndIsDeterministic) {
  const Config c = preset_config(Dims::kTiny);
  const std::string a = chorus::test::scratch_dir("breeze_make_tiny_a");
  const std::string b = chorus::test::scratch_dir("breeze_make_tiny_b");
  const std::string other = chorus::test::scratch_dir("breeze_make_tiny_other");
  ASSERT_TRUE(write_random_model(a, c, 7).ok());
  ASSERT_TRUE(write_random_model(b, c, 7).ok());
  ASSERT_TRUE(write_random_model(other, c, 8).ok());
  auto files = open_model_files(a);
  ASSERT_TRUE(files.ok()) << files.error().to_string();
  EXPECT_TRUE(files->unexpected_main.empty());
  EXPECT_TRUE(files->unexpected_codec.empty());
  EXPECT_TRUE(files->codec_has_encoder);
  EXPECT_EQ(config_to_json(files->config).dump(), config_to_json(c).dump());
  // The same dims as the reference: the reference's required tensors all exist with equal shapes.
  auto ref = io::Checkpoint::open_dir(test::tiny_model_dir());
  ASSERT_TRUE(ref.ok());
  const WeightTable table = main_weight_table(c);
  for (const auto& s : table.specs()) {
    if (s.optional) continue;
    ASSERT_NE(files->main.find(s.name), nullptr) << s.name;
    EXPECT_EQ(files->main.find(s.name)->shape, ref->find(s.name)->shape) << s.name;
    EXPECT_EQ(files->main.find(s.name)->dtype, DType::kBF16) << s.name;
  }
  for (const char* f : {"model.safetensors", "audio_tokenizer/model.safetensors", "tokenizer.model", "config.json"}) {
    EXPECT_EQ(slurp(a + "/" + f), slurp(b + "/" + f)) << f;
  }
  EXPECT_NE(slurp(a + "/model.safetensors"), slurp(other + "/model.safetensors"));
  // The tokenizer loads, and its pieces stay below every special id (eoi 480 is the lowest).
  ASSERT_FALSE(files->tokenizer_path.empty());
  auto tok = load_tokenizer(files->tokenizer_path, files->config);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_GT(tok->piece_count(), 256);
  EXPECT_LE(tok->piece_count(), 480);
  const auto ids = tok->encode("[S0]<ins_bos>warm<ins_eos>Hello there, 42!");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 500);
  EXPECT_EQ(ids[1], 510);
  EXPECT_EQ(tok->decode(ids), "[S0]<ins_bos>warm<ins_eos>Hello there, 42!");
}

}  // namespace
}  // namespace chorus::breeze_tts
