// Bad input gives clear errors, never a crash: codes out of range, wrong number of codebooks,
// empty input, misused streams, broken codec folders, malformed codes JSON.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "codec_test_util.h"
#include "models/codec/codec_folder.h"
#include "models/codec/codes_json.h"
#include "support/test_support.h"

namespace chorus::codec::test {
namespace {

namespace fs = std::filesystem;

class CodecErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = load_codec(tiny_codec_dir());
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    model_ = new CodecModel(std::move(m).value());
  }
  static void TearDownTestSuite() { delete model_; }
  static CodecModel* model_;
};
CodecModel* CodecErrors::model_ = nullptr;

void expect_error(const Status& st, ErrorCode code, const std::string& fragment) {
  ASSERT_FALSE(st.ok()) << "expected an error mentioning '" << fragment << "'";
  EXPECT_EQ(st.error().code, code) << st.error().to_string();
  EXPECT_NE(st.error().message.find(fragment), std::string::npos) << st.error().to_string();
}

TEST_F(CodecErrors, CodeOutOfRangeIsRejectedAndLeavesTheStreamUsable) {
  const Decoder& dec = model_->decoder;
  auto codes = random_codes(3, 16, 2048, 1);
  DecoderState s = dec.new_state();
  std::vector<float> out;
  for (int32_t bad : {2048, -1, 1 << 30}) {
    auto c = codes;
    c[1 * 16 + 5] = bad;
    expect_error(dec.decode(s, c.data(), 3, out), ErrorCode::kOutOfRange, "frame 1, codebook 5");
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(s.frames(), 0);
  }
  // The failed calls changed nothing: the stream still equals a fresh full decode.
  ASSERT_TRUE(dec.decode(s, codes.data(), 3, out).ok());
  auto full = dec.decode_all(codes.data(), 3);
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE(bitwise_equal(out, *full));
}

TEST_F(CodecErrors, EmptyAndNegativeInput) {
  const Decoder& dec = model_->decoder;
  expect_error(dec.decode_all(nullptr, 0).ok() ? Status() : dec.decode_all(nullptr, 0).error(),
               ErrorCode::kInvalidArgument, "no frames");
  DecoderState s = dec.new_state();
  std::vector<float> out;
  EXPECT_TRUE(dec.decode(s, nullptr, 0, out).ok());  // an empty streaming step is fine
  EXPECT_TRUE(out.empty());
  expect_error(dec.decode(s, nullptr, -1, out), ErrorCode::kInvalidArgument, "negative");
  expect_error(dec.decode(s, nullptr, 2, out), ErrorCode::kInvalidArgument, "no codes");
}

TEST_F(CodecErrors, StreamMisuse) {
  const Decoder& dec = model_->decoder;
  const auto codes = random_codes(2, 16, 2048, 2);
  std::vector<float> out;
  DecoderState s = dec.new_state();
  ASSERT_TRUE(dec.flush(s, out).ok());
  expect_error(dec.decode(s, codes.data(), 2, out), ErrorCode::kInvalidArgument, "already flushed");
  DecoderState blank;  // not made by a decoder
  expect_error(dec.decode(blank, codes.data(), 2, out), ErrorCode::kInvalidArgument, "not made by this decoder");
  DecoderState bad_chunks = dec.new_state(DecodeMode::kOfficialChunked, OfficialChunking{10, 10});
  expect_error(dec.decode(bad_chunks, codes.data(), 2, out), ErrorCode::kInvalidArgument, "left context");
  Decoder d2 = dec;
  expect_error(d2.set_block_frames(0), ErrorCode::kOutOfRange, "block size");
}

TEST(CodecFolder, FindsEveryLayoutAndExplainsWhatIsMissing) {
  const std::string ref = chorus::test::reference_path("");
  auto a = find_codec_dir(ref + "qwen3_tts/models/tiny_base");
  ASSERT_TRUE(a.ok());
  EXPECT_NE(a->find("speech_tokenizer"), std::string::npos);
  auto b = find_codec_dir(tiny_codec_dir());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(fs::path(*b), fs::path(tiny_codec_dir()));
  auto c = find_codec_dir(ref + "breeze_tts2/models/tiny_breeze");
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->find("audio_tokenizer"), std::string::npos);
  const std::string empty = chorus::test::scratch_dir("codec_empty_folder");
  expect_error(find_codec_dir(empty).ok() ? Status() : find_codec_dir(empty).error(), ErrorCode::kNotFound,
               "no speech codec");
  expect_error(find_codec_dir(empty + "/nope").ok() ? Status() : find_codec_dir(empty + "/nope").error(),
               ErrorCode::kNotFound, "not a directory");
}

TEST(CodecFolder, MissingOrMisshapenTensorIsNamed) {
  CodecConfig cfg = small_eight_layer_config();
  RandomCodec rc = make_random_codec(cfg, 7, "misshapen");
  // A config whose transformer is wider than the weights.
  CodecConfig wider = cfg;
  wider.decoder.transformer.hidden = 24;
  auto d = Decoder::load(rc.ckpt, wider);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kShapeMismatch) << d.error().to_string();
  EXPECT_NE(d.error().message.find("pre_transformer"), std::string::npos) << d.error().to_string();
  // More layers than the checkpoint holds.
  CodecConfig deeper = cfg;
  deeper.decoder.transformer.layers = 9;
  auto e = Decoder::load(rc.ckpt, deeper);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::kNotFound);
  EXPECT_NE(e.error().message.find("layers.8"), std::string::npos) << e.error().to_string();
  // Upsampling factors that do not give samples_per_frame.
  CodecConfig odd = cfg;
  odd.samples_per_frame = 1000;
  auto f = Decoder::load(rc.ckpt, odd);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find("samples_per_frame"), std::string::npos);
}

TEST(CodesJson, ReadsRowsAndRejectsBadShapesAndValues) {
  auto ok = parse_codes_json("{\"codes\": [[1,2,3],[4,5,6]]}", "x.json", 3, 8);
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(ok->frames, 2);
  EXPECT_EQ(ok->codes, (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));

  struct Case {
    const char* text;
    ErrorCode code;
    const char* fragment;
  };
  const Case cases[] = {
      {"{\"codes\": []}", ErrorCode::kInvalidArgument, "empty"},
      {"{\"codes\": [[1,2,3],[4,5]]}", ErrorCode::kShapeMismatch, "codes[1] has 2 codes, expected 3"},
      {"{\"codes\": [[1,2,3,4]]}", ErrorCode::kShapeMismatch, "codes[0] has 4 codes"},
      {"{\"codes\": [[1,2,8]]}", ErrorCode::kOutOfRange, "codes[0][2] = 8 is outside [0, 7]"},
      {"{\"codes\": [[1,-2,3]]}", ErrorCode::kOutOfRange, "codes[0][1] = -2"},
      {"{\"codes\": [[1,2,18446744073709551615]]}", ErrorCode::kOutOfRange, "codes[0][2]"},
      {"{\"codes\": [[1,2.5,3]]}", ErrorCode::kInvalidFormat, "not an integer"},
      {"{\"codes\": [[1,\"2\",3]]}", ErrorCode::kInvalidFormat, "not an integer"},
      {"{\"codes\": [5]}", ErrorCode::kInvalidFormat, "codes[0] is not an array"},
      {"{\"codes\": 5}", ErrorCode::kInvalidFormat, "not an array"},
      {"{\"frames\": []}", ErrorCode::kInvalidFormat, "expected an object"},
      {"[[1,2,3]]", ErrorCode::kInvalidFormat, "expected an object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = parse_codes_json(c.text, "x.json", 3, 8);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, c.code) << r.error().to_string();
    EXPECT_NE(r.error().message.find(c.fragment), std::string::npos) << r.error().to_string();
  }
  EXPECT_FALSE(parse_codes_json("{\"codes\": [[1,2,3]", "x.json", 3, 8).ok());  // truncated
}

TEST(CodesJson, WriteThenReadRoundTrips) {
  const auto codes = random_codes(5, 16, 2048, 3);
  const std::string path = chorus::test::scratch_dir("codes_json") + "/c.json";
  ASSERT_TRUE(write_codes_json(path, codes.data(), 5, 16).ok());
  auto back = read_codes_json(path, 16, 2048);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->codes, codes);
  auto wrong = read_codes_json(path, 15, 2048);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code, ErrorCode::kShapeMismatch);
  EXPECT_EQ(read_codes_json(path + ".missing", 16, 2048).error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace chorus::codec::test
