// engine::Codec::decode_streams on the CPU codec (the path every codec that does not batch takes):
// each stream gets what its own decode() gives, and a stream with a bad code fails alone, its
// output untouched, while the others are decoded.
#include <gtest/gtest.h>

#include "codec_test_util.h"
#include "engine/codec.h"

namespace chorus::codec::test {
namespace {

TEST(EngineCodecStreams, EachStreamGetsItsOwnDecodeAndItsOwnStatus) {
  auto codec = engine::load_codec(tiny_codec_dir(), engine::Device::cpu(), nullptr);
  ASSERT_TRUE(codec.ok()) << codec.error().to_string();
  const engine::Codec& c = **codec;
  EXPECT_FALSE(c.on_gpu());
  const int64_t Q = c.num_quantizers();
  constexpr int kStreams = 3;
  const std::vector<int64_t> frames = {2, 0, 3};
  std::vector<std::vector<int32_t>> codes;
  std::vector<std::unique_ptr<engine::CodecStream>> streams, solo;
  for (int i = 0; i < kStreams; ++i) {
    codes.push_back(random_codes(std::max<int64_t>(1, frames[static_cast<size_t>(i)]), Q, c.codebook_size(),
                              7 + static_cast<uint32_t>(i)));
    for (auto* list : {&streams, &solo}) {
      auto s = c.new_stream();
      ASSERT_TRUE(s.ok());
      list->push_back(std::move(*s));
    }
  }
  codes[2][static_cast<size_t>(Q + 2)] = static_cast<int32_t>(c.codebook_size());  // stream 2, frame 1: bad
  std::vector<std::vector<float>> got(kStreams, std::vector<float>{0.5f});  // a sample already there
  std::vector<engine::CodecStream*> s;
  std::vector<const int32_t*> p;
  std::vector<std::vector<float>*> o;
  for (int i = 0; i < kStreams; ++i) {
    s.push_back(streams[static_cast<size_t>(i)].get());
    p.push_back(codes[static_cast<size_t>(i)].data());
    o.push_back(&got[static_cast<size_t>(i)]);
  }
  const std::vector<Status> st = c.decode_streams(s, p, frames, o);
  ASSERT_EQ(st.size(), static_cast<size_t>(kStreams));
  EXPECT_TRUE(st[0].ok());
  EXPECT_TRUE(st[1].ok());
  ASSERT_FALSE(st[2].ok());
  EXPECT_EQ(st[2].error().code, ErrorCode::kOutOfRange);
  EXPECT_EQ(got[2], std::vector<float>{0.5f});  // nothing appended to the failed stream
  EXPECT_EQ(got[1], std::vector<float>{0.5f});  // no frames, nothing appended
  std::vector<float> want{0.5f};
  ASSERT_TRUE(solo[0]->decode(codes[0].data(), 2, want).ok());
  EXPECT_EQ(got[0], want);
  EXPECT_GT(got[0].size(), 1u);
  // Lists of different lengths: every stream fails, nothing decoded.
  const std::vector<Status> bad = c.decode_streams(s, p, std::vector<int64_t>{1, 1}, o);
  ASSERT_EQ(bad.size(), static_cast<size_t>(kStreams));
  for (const Status& b : bad) EXPECT_EQ(b.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(got[0], want);
}

}  // namespace
}  // namespace chorus::codec::test
