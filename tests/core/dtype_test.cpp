#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace chorus {
namespace {

TEST(DType, Bf16RoundTripIsExactForBf16Values) {
  std::mt19937 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const uint16_t h = static_cast<uint16_t>(rng());
    const float f = bf16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), h);
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to the even one (1).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
}

TEST(DType, F16MatchesReferenceOnAllValues) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to infinity
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 5, 97, 1000}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << i;
  }
}

}  // namespace
}  // namespace chorus
