// Replicas behind a balancer share one voices folder (a shared volume): a voice made through one
// must be usable, listed and deletable through another at once, and a deletion on one must be seen
// by the others, without a restart. Two stores on one folder stand for two processes.
#include <gtest/gtest.h>

#include <filesystem>

#include "server/voice_store.h"
#include "support/test_support.h"

namespace chorus::server {
namespace {

StoredVoice qwen_voice(const std::string& name, float first) {
  StoredVoice v;
  v.name = name;
  v.model = "tiny_base";
  v.voice.x_vector = {first, 0.25f, -0.5f, 1.0f};
  return v;
}

TEST(VoiceStoreShared, ReplicasOnOneFolderSeeEachOthersVoicesAndDeletions) {
  const std::string dir = test::scratch_dir("voices_shared");
  std::filesystem::remove_all(dir);
  auto a = VoiceStore::open(dir);
  auto b = VoiceStore::open(dir);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*b)->list().empty());

  auto made = (*a)->add(qwen_voice("alice", 0.5f));
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  const std::string id = (*made)->id;
  auto seen = (*b)->get(id);
  ASSERT_NE(seen, nullptr);
  EXPECT_EQ(seen->name, "alice");
  EXPECT_EQ(seen->voice.x_vector, (std::vector<float>{0.5f, 0.25f, -0.5f, 1.0f}));
  auto listed = (*b)->list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]->id, id);

  // Deleted through B: gone for A too, and A's own delete then reports it unknown.
  auto removed = (*b)->remove(id);
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_EQ((*a)->get(id), nullptr);
  EXPECT_TRUE((*a)->list().empty());
  auto again = (*a)->remove(id);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);

  // A voice made by A after B listed is in B's next list.
  auto second = (*a)->add(qwen_voice("bob", 0.75f));
  ASSERT_TRUE(second.ok());
  listed = (*b)->list();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]->name, "bob");
}

}  // namespace
}  // namespace chorus::server
