// The loader against files written by the official Python safetensors: the tiny reference models
// and goldens load, agree with an independent reading of their headers, and our writer reproduces
// them byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/st_bytes.h"
#include "support/test_support.h"

namespace chorus::io {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) { return test::read_bytes(path); }

// Every safetensors file under the tiny model folders (all must load).
std::vector<std::string> reference_model_files() {
  std::vector<std::string> out;
  for (const char* root : {"qwen3_tts/models", "breeze_tts2/models"}) {
    const fs::path dir = test::reference_path(root);
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ReferenceModels, AllTinyModelFilesLoadAndMatchAnIndependentHeaderReading) {
  const std::vector<std::string> files = reference_model_files();
  // 3 qwen3 talkers + 3 speech tokenizers + breeze model + audio tokenizer.
  ASSERT_GE(files.size(), 8u) << "reference models not found under " << test::shared_dir();
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    // Independent reading: nlohmann's plain parser on the raw header bytes.
    const std::string raw = slurp(path);
    uint64_t n = 0;
    std::memcpy(&n, raw.data(), 8);
    const auto header = nlohmann::json::parse(raw.substr(8, n));
    size_t tensors = 0;
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [k, v] : entry.items()) EXPECT_EQ(f->metadata().at(k), v.get<std::string>());
        continue;
      }
      ++tensors;
      const TensorInfo* info = f->find(name);
      ASSERT_NE(info, nullptr) << name;
      EXPECT_EQ(dtype_name(info->dtype), entry["dtype"].get<std::string>());
      EXPECT_EQ(info->shape, entry["shape"].get<Shape>());
      const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
      EXPECT_EQ(info->begin, begin);
      EXPECT_EQ(info->end, end);
      const Tensor t = f->tensor(*info);
      ASSERT_EQ(t.nbytes(), end - begin);
      EXPECT_EQ(std::memcmp(t.data(), raw.data() + 8 + n + begin, end - begin), 0) << name;
    }
    EXPECT_GT(tensors, 0u);
    EXPECT_EQ(f->tensors().size(), tensors);
    EXPECT_EQ(8 + n + f->data_bytes(), raw.size());
  }
}

TEST(ReferenceModels, CheckpointOpenDirFindsEveryTensor) {
  for (const char* dir : {"qwen3_tts/models/tiny_base", "qwen3_tts/models/tiny_custom_voice",
                          "qwen3_tts/models/tiny_voice_design", "qwen3_tts/models/tiny_base/speech_tokenizer",
                          "breeze_tts2/models/tiny_breeze", "breeze_tts2/models/tiny_breeze/audio_tokenizer"}) {
    SCOPED_TRACE(dir);
    auto ckpt = Checkpoint::open_dir(test::reference_path(dir));
    ASSERT_TRUE(ckpt.ok()) << ckpt.error().to_string();
    const auto names = ckpt->names();
    ASSERT_FALSE(names.empty());
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    uint64_t params = 0;
    for (const std::string& name : names) {
      const Tensor t = ckpt->tensor(name);
      ASSERT_FALSE(t.empty()) << name;
      params += static_cast<uint64_t>(t.numel());
      EXPECT_EQ(ckpt->file_of(name), test::reference_path(dir) + "/model.safetensors");
    }
    EXPECT_EQ(ckpt->total_params(), params);
  }
}

TEST(ReferenceModels, KnownTensorHasTheShapeAndValuesTheOfficialFileHolds) {
  auto ckpt = Checkpoint::open_dir(test::reference_path("qwen3_tts/models/tiny_base"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().to_string();
  // From the README: the speaker encoder's final conv has 96 output channels; the file says
  // speaker_encoder.asp.conv.bias is BF16 [96] at [0, 192).
  auto bias = ckpt->require("speaker_encoder.asp.conv.bias", {96}, {DType::kBF16});
  ASSERT_TRUE(bias.ok()) << bias.error().to_string();
  const std::string raw = slurp(test::reference_path("qwen3_tts/models/tiny_base/model.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(std::memcmp(bias->data(), raw.data() + 8 + n, 192), 0);
  // A value check that does not go through memcmp: the first bf16 element, decoded by hand.
  uint16_t h;
  std::memcpy(&h, raw.data() + 8 + n, 2);
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float expected;
  std::memcpy(&expected, &bits, 4);
  EXPECT_EQ(bias->to_f32().f32()[0], expected);
}

TEST(ReferenceModels, WriterReproducesOfficialFilesByteForByte) {
  // The official writer lays tensors out in its own order with a compact header; writing the
  // same tensors in that order with the same metadata must give identical bytes.
  const std::vector<std::string> paths = {
      test::reference_path("qwen3_tts/models/tiny_base/model.safetensors"),
      test::reference_path("qwen3_tts/models/tiny_base/speech_tokenizer/model.safetensors"),
      test::reference_path("qwen3_tts/goldens/prefill_base.safetensors"),
      test::reference_path("breeze_tts2/goldens/text_encoder.safetensors"),
      test::reference_path("breeze_tts2/models/tiny_breeze/model.safetensors")};
  const std::string out_dir = test::scratch_dir("io_writer_reproduces");
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().to_string();
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& info : f->tensors()) tensors.push_back({info.name, f->tensor(info)});
    const std::string out = out_dir + "/copy.safetensors";
    ASSERT_TRUE(write_safetensors(out, tensors, f->metadata()).ok());
    const std::string a = slurp(path), b = slurp(out);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b);
  }
}

}  // namespace
}  // namespace chorus::io
