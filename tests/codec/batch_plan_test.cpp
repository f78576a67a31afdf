// How CudaDecoder::decode_batch cuts many streams' frames into steps (models/codec/batch_plan.h),
// checked against the rules it must keep, replayed per stream: every frame of every stream
// decoded exactly once and in order, no step of a stream larger than its block or the capacity,
// one n per step, no step over capacity, no stream twice in a step, and serving's shape (one new
// frame each) in the fewest steps.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "models/codec/batch_plan.h"

namespace chorus::codec {
namespace {

// Replays the plan: each stream's frames must come out as consecutive steps covering [0, frames).
void check_plan(const std::vector<int64_t>& frames, const std::vector<int64_t>& blocks, int64_t capacity) {
  const std::vector<BatchStep> plan = plan_batch_steps(frames, blocks, capacity);
  std::vector<int64_t> done(frames.size(), 0);
  for (const BatchStep& s : plan) {
    ASSERT_GE(s.frames, 1);
    ASSERT_FALSE(s.streams.empty());
    EXPECT_LE(static_cast<int64_t>(s.streams.size()) * s.frames, capacity);
    for (size_t k = 0; k < s.streams.size(); ++k) {
      const size_t i = s.streams[k];
      ASSERT_LT(i, frames.size());
      if (k > 0) {
        EXPECT_LT(s.streams[k - 1], i) << "streams of a step ascend (so none is there twice)";
      }
      EXPECT_LE(s.frames, blocks[i]);
      done[i] += s.frames;
      EXPECT_LE(done[i], frames[i]) << "stream " << i << " decodes past its frames";
    }
  }
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(done[i], frames[i]) << "stream " << i;
}

TEST(BatchPlan, ServingIsOneStepPerCapacityOfStreams) {
  const std::vector<int64_t> frames(300, 1), blocks(300, 8);
  const auto plan = plan_batch_steps(frames, blocks, 128);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].streams.size(), 128u);
  EXPECT_EQ(plan[2].streams.size(), 44u);
  for (const auto& s : plan) EXPECT_EQ(s.frames, 1);
  check_plan(frames, blocks, 128);
}

TEST(BatchPlan, MixedCountsAndBlocksKeepEveryStreamInOrder) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> f(0, 40), b(1, 16);
  for (int round = 0; round < 50; ++round) {
    std::vector<int64_t> frames(static_cast<size_t>(1 + round % 37)), blocks(frames.size());
    for (size_t i = 0; i < frames.size(); ++i) {
      frames[i] = f(rng);
      blocks[i] = b(rng);
    }
    for (int64_t cap : {1, 7, 16, 128}) check_plan(frames, blocks, cap);
  }
}

TEST(BatchPlan, StepsNeverExceedTheCapacityEvenForLargeBlocks) {
  check_plan({300, 5}, {256, 256}, 16);
  const auto plan = plan_batch_steps(std::vector<int64_t>{300}, std::vector<int64_t>{256}, 16);
  ASSERT_EQ(plan.size(), 19u);  // 18 steps of 16 frames, then 12
  for (size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(plan[i].frames, i < 18 ? 16 : 12);
}

TEST(BatchPlan, NothingToDoIsNoStep) {
  EXPECT_TRUE(plan_batch_steps(std::vector<int64_t>{0, 0}, std::vector<int64_t>{8, 8}, 128).empty());
  EXPECT_TRUE(plan_batch_steps({}, {}, 128).empty());
  EXPECT_TRUE(plan_batch_steps(std::vector<int64_t>{3}, std::vector<int64_t>{8}, 0).empty());
}

}  // namespace
}  // namespace chorus::codec
