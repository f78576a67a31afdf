// Hugging Face ids resolved in the local hub cache. The cache layout is the one huggingface_hub
// documents ("Manage the cache"): models--{owner}--{name}/refs/{revision} holds a commit hash,
// snapshots/{commit}/ the files.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/model_dir.h"
#include "support/test_support.h"

namespace chorus::io {
namespace {

namespace fs = std::filesystem;

const std::string kCommitA = "0123456789abcdef0123456789abcdef01234567";
const std::string kCommitB = "fedcba9876543210fedcba9876543210fedcba98";

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A cache with Qwen/Tiny at two snapshots (main → A, ref "v2" → B) and Solo/One with one snapshot
// and no refs; HF_HUB_CACHE points at it for the test's lifetime.
class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::scratch_dir("hub");
    const fs::path tiny = fs::path(root_) / "models--Qwen--Tiny";
    fs::create_directories(tiny / "snapshots" / kCommitA);
    fs::create_directories(tiny / "snapshots" / kCommitB);
    write(tiny / "refs" / "main", kCommitA + "\n");
    write(tiny / "refs" / "v2", kCommitB);
    fs::create_directories(fs::path(root_) / "models--Solo--One" / "snapshots" / kCommitB);
    write(fs::path(root_) / "models--Bad--Ref" / "refs" / "main", "../../../../etc");
    fs::create_directories(fs::path(root_) / "models--Bad--Ref" / "snapshots" / kCommitA);
    ASSERT_EQ(setenv("HF_HUB_CACHE", root_.c_str(), 1), 0);
  }
  void TearDown() override { unsetenv("HF_HUB_CACHE"); }
  std::string snapshot(const std::string& repo, const std::string& commit) const {
    return (fs::path(root_) / ("models--" + repo) / "snapshots" / commit).string();
  }
  std::string root_;
};

TEST_F(HubCache, ExistingFoldersAreReturnedUnchanged) {
  const std::string dir = test::scratch_dir("plain");
  auto r = resolve_model_dir(dir);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, dir);
}

TEST_F(HubCache, IdsResolveThroughRefsOrCommits) {
  auto main = resolve_model_dir("Qwen/Tiny");
  ASSERT_TRUE(main.ok()) << main.error().to_string();
  EXPECT_EQ(*main, snapshot("Qwen--Tiny", kCommitA));
  auto v2 = resolve_model_dir("Qwen/Tiny@v2");
  ASSERT_TRUE(v2.ok()) << v2.error().to_string();
  EXPECT_EQ(*v2, snapshot("Qwen--Tiny", kCommitB));
  auto commit = resolve_model_dir("Qwen/Tiny@" + kCommitB);
  ASSERT_TRUE(commit.ok()) << commit.error().to_string();
  EXPECT_EQ(*commit, snapshot("Qwen--Tiny", kCommitB));
  auto solo = resolve_model_dir("Solo/One");  // no refs, one snapshot
  ASSERT_TRUE(solo.ok()) << solo.error().to_string();
  EXPECT_EQ(*solo, snapshot("Solo--One", kCommitB));
}

TEST_F(HubCache, MissingModelsSayWhereTheyWereLookedFor) {
  auto r = resolve_model_dir("Qwen/Absent");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find(root_), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("chorus pull"), std::string::npos) << r.error().message;
  auto rev = resolve_model_dir("Qwen/Tiny@nope");
  ASSERT_FALSE(rev.ok());
  EXPECT_EQ(rev.error().code, ErrorCode::kNotFound);
}

TEST_F(HubCache, HostileIdsAndRefsNeverLeaveTheCache) {
  for (const std::string id : {"../x", "a/..", "a/b/c", "/no-such-dir", "a/b@../../c", "a/b@", "a/", "/b", "", "a\\b/c"}) {
    auto r = resolve_model_dir(id);
    EXPECT_FALSE(r.ok()) << "'" << id << "' resolved to " << *r;
  }
  auto bad = resolve_model_dir("Bad/Ref");  // refs/main is not a commit hash
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

TEST(HubCacheDir, FollowsTheHuggingFaceVariablesInOrder) {
  const char* home = std::getenv("HOME");
  const std::string saved_home = home ? home : "";
  unsetenv("HF_HUB_CACHE");
  ASSERT_EQ(setenv("HF_HOME", "/hf/home", 1), 0);
  EXPECT_EQ(hf_hub_cache_dir(), "/hf/home/hub");
  unsetenv("HF_HOME");
  ASSERT_EQ(setenv("XDG_CACHE_HOME", "/xdg", 1), 0);
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  unsetenv("XDG_CACHE_HOME");
  ASSERT_EQ(setenv("HOME", "/home/u", 1), 0);
  EXPECT_EQ(hf_hub_cache_dir(), "/home/u/.cache/huggingface/hub");
  ASSERT_EQ(setenv("HF_HUB_CACHE", "/direct", 1), 0);
  EXPECT_EQ(hf_hub_cache_dir(), "/direct");
  unsetenv("HF_HUB_CACHE");
  setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace chorus::io
