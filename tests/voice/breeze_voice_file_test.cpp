// Voice files of the Breeze TTS 2 family (model_family "breeze-tts": reference codes and transcript,
// no x-vector, an optional codec signature): round trip, and the files a reader must refuse.
// Qwen3-TTS voices are covered by tests/encoders/voice_file_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "io/safetensors.h"
#include "models/qwen3_tts/voice_check.h"
#include "support/test_support.h"

namespace chorus::qwen3_tts {
namespace {

using namespace chorus::voice;  // the shared voice file format

Voice breeze_voice() {
  Voice v;
  v.model_family = kVoiceFamilyBreeze;
  v.codebooks = 16;
  v.frames = 3;
  for (int i = 0; i < 48; ++i) v.ref_codes.push_back(i * 37 % 2048);
  v.ref_text_ids = {5, 6, 7};
  v.codec = "12hz-24000-1920-16x2048";
  v.ref_seconds = 0.24;
  return v;
}

// scratch_dir() empties its folder on every call: one call per test.
std::string path_of(const std::string& name) {
  static std::string dir, owner;
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  if (owner != test) dir = test::scratch_dir("breeze_voice_file"), owner = test;
  return dir + "/" + name;
}

// A voice file written tensor by tensor, so fields the writer would refuse can be planted.
std::string raw_file(const std::string& name, std::map<std::string, std::string> meta, bool with_codes, int64_t x_dim) {
  std::vector<io::TensorToWrite> t;
  if (with_codes) {
    Tensor c = Tensor::zeros(DType::kI32, {3, 16});
    t.push_back({"ref_codes", c});
  }
  if (x_dim > 0) t.push_back({"x_vector", Tensor::zeros(DType::kF32, {x_dim})});
  const std::string p = path_of(name);
  EXPECT_TRUE(io::write_safetensors(p, t, meta).ok());
  return p;
}

std::map<std::string, std::string> breeze_meta() {
  return {{"format", kVoiceFormat}, {"version", kVoiceVersion}, {"model_family", kVoiceFamilyBreeze},
          {"speaker_dim", "0"},     {"codebooks", "16"}};
}

TEST(BreezeVoiceFile, RoundTrip) {
  const Voice v = breeze_voice();
  ASSERT_TRUE(write_voice_file(path_of("a.voice"), v).ok());
  auto back = read_voice_file(path_of("a.voice"));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->model_family, kVoiceFamilyBreeze);
  EXPECT_TRUE(back->x_vector.empty());
  EXPECT_EQ(back->frames, 3);
  EXPECT_EQ(back->ref_codes, v.ref_codes);
  EXPECT_EQ(back->ref_text_ids, v.ref_text_ids);
  EXPECT_EQ(back->codec, v.codec);
  // The raw writer's form of the same fields reads back too (the planted cases below differ by one field).
  EXPECT_TRUE(read_voice_file(raw_file("raw_ok.voice", breeze_meta(), true, 0)).ok());
}

TEST(BreezeVoiceFile, RefusedFiles) {
  auto expect_refused = [](const std::string& p, const char* words) {
    auto v = read_voice_file(p);
    ASSERT_FALSE(v.ok()) << p;
    EXPECT_NE(v.error().message.find(words), std::string::npos) << v.error().message;
  };
  expect_refused(raw_file("no_codes.voice", breeze_meta(), false, 0), "needs reference codes");
  expect_refused(raw_file("x_vector.voice", breeze_meta(), true, 8), "x_vector");
  auto dim = breeze_meta();
  dim["speaker_dim"] = "8";
  expect_refused(raw_file("dim.voice", dim, true, 8), "speaker_dim");
  auto codec = breeze_meta();
  codec["codec"] = "12hz\n<script>";
  expect_refused(raw_file("codec.voice", codec, true, 0), "codec");
  auto family = breeze_meta();
  family["model_family"] = "breeze-tts-3";
  expect_refused(raw_file("family.voice", family, true, 0), "breeze-tts-3");
  // The writer refuses what the reader would.
  Voice with_x = breeze_voice();
  with_x.x_vector = {1.0f};
  EXPECT_FALSE(write_voice_file(path_of("w.voice"), with_x).ok());
}

TEST(BreezeVoiceFile, QwenModelsRefuseBreezeVoices) {
  Config qwen;
  qwen.talker.dims.hidden = 16;
  qwen.talker.num_code_groups = 16;
  qwen.code_predictor.vocab = 2048;
  const Status st = check_voice_for_model(breeze_voice(), qwen, "b.voice");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(st.error().message.find("breeze-tts"), std::string::npos) << st.error().message;
}

}  // namespace
}  // namespace chorus::qwen3_tts
