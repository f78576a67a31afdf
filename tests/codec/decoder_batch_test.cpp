// Decoder::decode_batch: several streams decoded together give each stream, bitwise, what its own
// decode gives, whichever streams share a call, however many frames each brings, and whenever it
// joined; a bad request changes nothing. The 8-layer random codec runs long enough for the
// transformer's caches to compact and for every transposed convolution to reach a full history.
#include <gtest/gtest.h>

#include <random>

#include "codec_test_util.h"
#include "models/codec/codec_folder.h"
#include "runtime/cpu/kernels.h"
#include "runtime/kernel_test_util.h"

namespace chorus::codec::test {
namespace {

constexpr int64_t kQ = 16;

struct Stream {
  std::vector<int32_t> codes;
  int64_t frames = 0, joins = 0;  // its length, and the call it first appears in
  int64_t done = 0;
  DecoderState state;
  std::vector<float> out;
};

// Streams of different lengths joining at different calls; each call takes a random 1..max_take
// frames of every joined stream that still has some (or skips it now and then), all in one
// decode_batch(). Returns the calls that had at least two streams.
int64_t decode_in_batches(const Decoder& dec, std::vector<Stream>& streams, int64_t max_take, uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t shared_calls = 0;
  for (int64_t call = 0;; ++call) {
    std::vector<DecoderState*> states;
    std::vector<const int32_t*> codes;
    std::vector<int64_t> frames;
    std::vector<std::vector<float>*> outs;
    bool left = false;
    for (Stream& s : streams) {
      if (s.done == s.frames) continue;
      left = true;
      if (call < s.joins || rng() % 5 == 0) continue;
      const int64_t n = std::min<int64_t>(s.frames - s.done, 1 + static_cast<int64_t>(rng() % max_take));
      states.push_back(&s.state);
      codes.push_back(s.codes.data() + s.done * kQ);
      frames.push_back(n);
      outs.push_back(&s.out);
      s.done += n;
    }
    if (!left) break;
    shared_calls += states.size() >= 2;
    const Status st = dec.decode_batch(states, codes, frames, outs);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) break;
  }
  return shared_calls;
}

std::vector<Stream> make_streams(const Decoder& dec, std::initializer_list<std::pair<int64_t, int64_t>> shape,
                                 uint32_t seed) {
  std::vector<Stream> streams;
  for (const auto& [frames, joins] : shape) {
    Stream s;
    s.codes = random_codes(frames, kQ, dec.codebook_size(), seed++);
    s.frames = frames;
    s.joins = joins;
    s.state = dec.new_state();
    streams.push_back(std::move(s));
  }
  return streams;
}

using BatchTest = cpu::test::IsaTest;

TEST_P(BatchTest, StreamsJoiningAnyCallEqualTheirOwnDecodeBitwise) {
  static const RandomCodec rc = make_random_codec(small_eight_layer_config(), 44, "batch8");
  auto dec = Decoder::load(rc.ckpt, rc.config);
  ASSERT_TRUE(dec.ok()) << dec.error().to_string();
  // Blocks of 4 frames (the default) and of 64, so that the stages see few columns per stream
  // (gathered, weights shared) and many (stream by stream).
  for (const int64_t block : {4, 64}) {
    SCOPED_TRACE("block " + std::to_string(block));
    Decoder d = *dec;
    ASSERT_TRUE(d.set_block_frames(block).ok());
    auto streams = make_streams(d, {{150, 0}, {97, 3}, {1, 5}, {120, 20}, {60, 41}}, 100);
    const int64_t shared = decode_in_batches(d, streams, block == 4 ? 3 : 90, 7);
    EXPECT_GT(shared, block == 4 ? 10 : 2);
    std::vector<float> first;
    for (Stream& s : streams) {
      auto alone = d.decode_all(s.codes.data(), s.frames);
      ASSERT_TRUE(alone.ok());
      EXPECT_EQ(s.out.size(), static_cast<size_t>(s.frames * d.samples_per_frame()));
      EXPECT_TRUE(bitwise_equal(s.out, *alone)) << "stream of " << s.frames << " frames joining at " << s.joins;
      if (first.empty()) first = s.out;
    }
    // Not vacuous: the streams' audio differs (different codes make different audio).
    EXPECT_FALSE(std::equal(first.begin(), first.begin() + 1920, streams[1].out.begin()));
  }
}

TEST_P(BatchTest, TinyReferenceCodecBatchesExactly) {
  auto m = load_codec(tiny_codec_dir());
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto streams = make_streams(m->decoder, {{90, 0}, {90, 0}, {33, 10}, {80, 2}}, 200);
  EXPECT_GT(decode_in_batches(m->decoder, streams, 2, 8), 10);
  for (Stream& s : streams) {
    auto alone = m->decoder.decode_all(s.codes.data(), s.frames);
    ASSERT_TRUE(alone.ok());
    EXPECT_TRUE(bitwise_equal(s.out, *alone));
  }
}

TEST_P(BatchTest, OfficialModeStreamsShareACallAndStayOfficial) {
  auto m = load_codec(tiny_codec_dir());
  ASSERT_TRUE(m.ok());
  const Decoder& d = m->decoder;
  const OfficialChunking chunking{20, 5};
  const auto a = random_codes(50, kQ, 2048, 300), b = random_codes(50, kQ, 2048, 301);
  DecoderState sa = d.new_state(DecodeMode::kOfficialChunked, chunking), sb = d.new_state();
  std::vector<float> oa, ob;
  for (int64_t f = 0; f < 50; f += 5) {
    DecoderState* states[] = {&sa, &sb};
    const int32_t* codes[] = {a.data() + f * kQ, b.data() + f * kQ};
    const int64_t frames[] = {5, 5};
    std::vector<float>* outs[] = {&oa, &ob};
    ASSERT_TRUE(d.decode_batch(states, codes, frames, outs).ok());
  }
  auto wa = d.decode_all(a.data(), 50, DecodeMode::kOfficialChunked, chunking);
  auto wb = d.decode_all(b.data(), 50);
  ASSERT_TRUE(wa.ok() && wb.ok());
  EXPECT_TRUE(bitwise_equal(oa, *wa));
  EXPECT_TRUE(bitwise_equal(ob, *wb));
}

CHORUS_INSTANTIATE_ISA(BatchTest);

TEST(DecoderBatch, BadRequestsChangeNothing) {
  auto m = load_codec(tiny_codec_dir());
  ASSERT_TRUE(m.ok());
  const Decoder& d = m->decoder;
  auto codes = random_codes(6, kQ, 2048, 400);
  const auto good = random_codes(6, kQ, 2048, 401);
  DecoderState s1 = d.new_state(), s2 = d.new_state();
  std::vector<float> o1, o2;
  {  // stream 2's frame 4 has a code past the codebook: an error naming it, nothing decoded
    codes[4 * kQ + 3] = 2048;
    DecoderState* states[] = {&s1, &s2};
    const int32_t* c[] = {good.data(), codes.data()};
    const int64_t frames[] = {6, 6};
    std::vector<float>* outs[] = {&o1, &o2};
    const Status st = d.decode_batch(states, c, frames, outs);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, ErrorCode::kOutOfRange);
    EXPECT_NE(st.error().message.find("frame 4"), std::string::npos) << st.error().message;
    EXPECT_TRUE(o1.empty() && o2.empty());
    EXPECT_EQ(s1.frames(), 0);
  }
  {  // the same stream twice
    DecoderState* states[] = {&s1, &s1};
    const int32_t* c[] = {good.data(), good.data()};
    const int64_t frames[] = {1, 1};
    std::vector<float>* outs[] = {&o1, &o2};
    EXPECT_EQ(d.decode_batch(states, c, frames, outs).error().code, ErrorCode::kInvalidArgument);
  }
  {  // counts that disagree, a missing output
    DecoderState* states[] = {&s1};
    const int32_t* c[] = {good.data(), good.data()};
    const int64_t frames[] = {1};
    std::vector<float>* outs[] = {nullptr};
    EXPECT_FALSE(d.decode_batch(states, c, frames, outs).ok());
    EXPECT_FALSE(d.decode_batch(states, std::span(c, 1), frames, outs).ok());
  }
  EXPECT_TRUE(o1.empty() && o2.empty());
  // Untouched: stream 1 still decodes as a fresh stream.
  DecoderState* states[] = {&s1};
  const int32_t* c[] = {good.data()};
  const int64_t frames[] = {6};
  std::vector<float>* outs[] = {&o1};
  ASSERT_TRUE(d.decode_batch(states, c, frames, outs).ok());
  auto want = d.decode_all(good.data(), 6);
  ASSERT_TRUE(want.ok());
  EXPECT_TRUE(bitwise_equal(o1, *want));
}

}  // namespace
}  // namespace chorus::codec::test
