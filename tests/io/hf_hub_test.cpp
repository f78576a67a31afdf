// io/hf_hub.h without a Hub: which repository files a model needs, id parsing, HF_HUB_OFFLINE, and
// failures that need no server (a refused connection). The download itself is tested against a
// mock Hub in python/tests/test_hub.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/hf_hub.h"
#include "io/model_dir.h"

namespace chorus::io {
namespace {

TEST(HubFiles, OnlyWhatAModelNeeds) {
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "model-00001-of-00002.safetensors",
                        "model.safetensors.index.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                        "tokenizer.json", "speech_tokenizer/config.json", "speech_tokenizer/model.safetensors",
                        "audio_tokenizer/model.safetensors", "speech_tokenizer/preprocessor_config.json"})
    EXPECT_TRUE(hub_file_needed(f)) << f;
  for (const char* f : {"README.md", ".gitattributes", "pytorch_model.bin", "extra/model.safetensors",
                        "speech_tokenizer/README.md", "speech_tokenizer/sub/model.safetensors", "assets/sample.wav",
                        "model.onnx"})
    EXPECT_FALSE(hub_file_needed(f)) << f;
}

TEST(HubIds, ParsedWithRevision) {
  HubRepoId id;
  ASSERT_TRUE(parse_hub_repo_id("Qwen/Qwen3-TTS-12Hz-0.6B-Base@v1.0", &id));
  EXPECT_EQ(id.owner, "Qwen");
  EXPECT_EQ(id.name, "Qwen3-TTS-12Hz-0.6B-Base");
  EXPECT_EQ(id.revision, "v1.0");
  EXPECT_EQ(id.cache_folder(), "models--Qwen--Qwen3-TTS-12Hz-0.6B-Base");
  ASSERT_TRUE(parse_hub_repo_id("a/b", &id));
  EXPECT_EQ(id.revision, "main");
  for (const char* bad : {"../x", "a/..", "a/b/c", "a/b@../c", "a/b@", "", "a", "a b/c"})
    EXPECT_FALSE(parse_hub_repo_id(bad, &id)) << bad;
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
}

class HubEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("chorus_hub_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    unsetenv("HF_HUB_OFFLINE");
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path dir_;
};

TEST_F(HubEnv, OfflineRefusesBeforeAnyRequest) {
  setenv("HF_HUB_OFFLINE", "1", 1);
  EXPECT_TRUE(hf_hub_offline());
  HubOptions o;
  o.cache_dir = dir_.string();
  o.endpoint = "http://127.0.0.1:1";
  auto r = hf_hub_download_model("Org/Name", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r.error().message.find("HF_HUB_OFFLINE"), std::string::npos) << r.error().message;
  setenv("HF_HUB_OFFLINE", "0", 1);
  EXPECT_FALSE(hf_hub_offline());
}

TEST_F(HubEnv, BadIdsAndRefusedConnectionsAreErrors) {
  HubOptions o;
  o.cache_dir = dir_.string();
  o.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  o.attempts = 1;
  auto bad = hf_hub_download_model("../../etc", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  auto refused = hf_hub_download_model("Org/Name", o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kIo);
  EXPECT_NE(refused.error().message.find("127.0.0.1:1"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "models--Org--Name" / "snapshots"));
}

}  // namespace
}  // namespace chorus::io
