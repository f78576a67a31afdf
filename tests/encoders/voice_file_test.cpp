// Voice files: round trip, and a battery of hostile files that must each give an error (not a
// crash, not a silently wrong voice): wrong format or version, bad shapes and dtypes, non-finite
// x-vectors, out-of-range codes, unknown tensors, malformed metadata, every truncation.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "encoder_test_util.h"
#include "io/file_util.h"
#include "models/qwen3_tts/voice_check.h"

namespace chorus::test {
namespace {

using voice::Voice;

Voice sample_voice() {
  Voice v;
  for (int i = 0; i < 32; ++i) v.x_vector.push_back(0.25f * static_cast<float>(i) - 3.0f);
  v.frames = 3;
  v.codebooks = 16;
  for (int i = 0; i < 48; ++i) v.ref_codes.push_back((i * 37) % 2048);
  v.ref_text = "Bonjour, ça va? 你好";
  v.ref_seconds = 0.24;
  return v;
}

std::string bytes_of(const std::string& path) {
  auto b = io::read_file_capped(path, 1 << 24);
  EXPECT_TRUE(b.ok());
  return b.ok() ? *b : std::string();
}

// A safetensors file built by hand (header JSON + raw data), for files our writer refuses to make.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.begin(), s.size());
  return s;
}

TEST(VoiceFile, RoundTrip) {
  const std::string path = scratch_dir("voice_rt") + "/a.voice";
  const Voice v = sample_voice();
  ASSERT_TRUE(voice::write_voice_file(path, v).ok());
  auto r = voice::read_voice_file(path);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->x_vector, v.x_vector);
  EXPECT_EQ(r->ref_codes, v.ref_codes);
  EXPECT_EQ(r->frames, 3);
  EXPECT_EQ(r->codebooks, 16);
  EXPECT_EQ(r->ref_text, v.ref_text);
  EXPECT_NEAR(r->ref_seconds, 0.24, 1e-9);
  EXPECT_EQ(r->model_family, "qwen3-tts");

  // Ids instead of text, and an x-vector-only voice without codes.
  Voice w = v;
  w.ref_text.clear();
  w.ref_text_ids = {1000, 900, 10, 358, 1001, 10};
  w.ref_codes.clear();
  w.frames = 0;
  ASSERT_TRUE(voice::write_voice_file(path, w).ok());
  r = voice::read_voice_file(path);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->ref_text_ids, w.ref_text_ids);
  EXPECT_FALSE(r->has_codes());
  EXPECT_TRUE(r->has_ref_text());
}

TEST(VoiceFile, WriterRefusesInconsistentVoices) {
  const std::string path = scratch_dir("voice_w") + "/a.voice";
  auto refuse = [&](const std::function<void(Voice&)>& edit) {
    Voice v = sample_voice();
    edit(v);
    return !voice::write_voice_file(path, v).ok();
  };
  EXPECT_TRUE(refuse([](Voice& v) { v.x_vector.clear(); }));
  EXPECT_TRUE(refuse([](Voice& v) { v.x_vector[3] = NAN; }));
  EXPECT_TRUE(refuse([](Voice& v) { v.ref_codes.pop_back(); }));
  EXPECT_TRUE(refuse([](Voice& v) { v.ref_codes[5] = -1; }));
  EXPECT_TRUE(refuse([](Voice& v) { v.ref_text_ids = {1, 2}; }));  // both text and ids
  EXPECT_TRUE(refuse([](Voice& v) { v.ref_text = "\xff\xfe"; }));   // not UTF-8
  EXPECT_TRUE(refuse([](Voice& v) { v.model_family = "other"; }));
  EXPECT_FALSE(refuse([](Voice&) {}));
}

TEST(VoiceFile, HostileFilesAreErrors) {
  const std::string good_path = scratch_dir("voice_h") + "/good.voice";
  ASSERT_TRUE(voice::write_voice_file(good_path, sample_voice()).ok());
  const std::string good = bytes_of(good_path);
  ASSERT_TRUE(voice::parse_voice_file(good, "good").ok());

  const std::string meta_ok = R"("format":"chorus-voice","version":"1","model_family":"qwen3-tts","speaker_dim":"2","codebooks":"2")";
  auto file = [&](const std::string& meta, const std::string& tensors, const std::string& data) {
    return raw_file("{\"__metadata__\":{" + meta + "}" + (tensors.empty() ? "" : "," + tensors) + "}", data);
  };
  const std::string xv = R"("x_vector":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string two = floats({0.5f, -1.5f});
  ASSERT_TRUE(voice::parse_voice_file(file(meta_ok, xv, two), "hand-made").ok());

  const std::map<std::string, std::string> cases = {
      {"empty", ""},
      {"not safetensors", "hello world, this is not a voice"},
      {"no metadata", raw_file("{" + xv + "}", two)},
      {"wrong format", file(R"("format":"pt","version":"1","model_family":"qwen3-tts","speaker_dim":"2","codebooks":"2")", xv, two)},
      {"newer version", file(R"("format":"chorus-voice","version":"2","model_family":"qwen3-tts","speaker_dim":"2","codebooks":"2")", xv, two)},
      {"unknown family", file(R"("format":"chorus-voice","version":"1","model_family":"x","speaker_dim":"2","codebooks":"2")", xv, two)},
      {"no family", file(R"("format":"chorus-voice","version":"1","speaker_dim":"2","codebooks":"2")", xv, two)},
      {"dim not a number", file(R"("format":"chorus-voice","version":"1","model_family":"qwen3-tts","speaker_dim":"2x","codebooks":"2")", xv, two)},
      {"dim negative", file(R"("format":"chorus-voice","version":"1","model_family":"qwen3-tts","speaker_dim":"-2","codebooks":"2")", xv, two)},
      {"dim huge", file(R"("format":"chorus-voice","version":"1","model_family":"qwen3-tts","speaker_dim":"99999999999999999999","codebooks":"2")", xv, two)},
      {"dim mismatch", file(R"("format":"chorus-voice","version":"1","model_family":"qwen3-tts","speaker_dim":"3","codebooks":"2")", xv, two)},
      {"no x_vector", file(meta_ok, "", "")},
      {"x_vector f16", file(meta_ok, R"("x_vector":{"dtype":"F16","shape":[2],"data_offsets":[0,4]})", "abcd")},
      {"x_vector rank 2", file(meta_ok, R"("x_vector":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]})", two)},
      {"x_vector nan", file(meta_ok, xv, floats({0.5f, NAN}))},
      {"x_vector inf", file(meta_ok, xv, floats({INFINITY, 1.0f}))},
      {"x_vector huge", file(meta_ok, xv, floats({1e30f, 1.0f}))},
      {"unknown tensor", file(meta_ok, xv + R"(,"extra":{"dtype":"F32","shape":[1],"data_offsets":[8,12]})", two + floats({1}))},
      {"codes f32", file(meta_ok, xv + R"(,"ref_codes":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]})", two + floats({1, 2}))},
      {"codes wrong width", file(meta_ok, xv + R"(,"ref_codes":{"dtype":"I32","shape":[2,1],"data_offsets":[8,16]})", two + std::string(8, '\0'))},
      {"codes zero frames", file(meta_ok, xv + R"(,"ref_codes":{"dtype":"I32","shape":[0,2],"data_offsets":[8,8]})", two)},
      {"codes negative", file(meta_ok, xv + R"(,"ref_codes":{"dtype":"I32","shape":[1,2],"data_offsets":[8,16]})", two + std::string(8, '\xff'))},
      {"codes without codebooks", file(R"("format":"chorus-voice","version":"1","model_family":"qwen3-tts","speaker_dim":"2","codebooks":"0")",
                                       xv + R"(,"ref_codes":{"dtype":"I32","shape":[1,0],"data_offsets":[8,8]})", two)},
      {"ids not json", file(meta_ok + R"(,"ref_text_ids":"[1, 2")", xv, two)},
      {"ids not ints", file(meta_ok + R"(,"ref_text_ids":"[1, 2.5]")", xv, two)},
      {"ids negative", file(meta_ok + R"(,"ref_text_ids":"[1, -2]")", xv, two)},
      {"ids too big", file(meta_ok + R"(,"ref_text_ids":"[1, 4294967296]")", xv, two)},
      {"ids nested", file(meta_ok + R"(,"ref_text_ids":"[[1]]")", xv, two)},
      {"ids empty", file(meta_ok + R"(,"ref_text_ids":"[]")", xv, two)},
      {"text and ids", file(meta_ok + R"(,"ref_text":"hi","ref_text_ids":"[1]")", xv, two)},
      {"text with NUL", file(meta_ok + R"(,"ref_text":"a\u0000b")", xv, two)},
      {"seconds nan", file(meta_ok + R"(,"ref_seconds":"nan")", xv, two)},
      {"seconds junk", file(meta_ok + R"(,"ref_seconds":"3s")", xv, two)},
  };
  for (const auto& [name, bytes] : cases) {
    auto r = voice::parse_voice_file(bytes, name);
    EXPECT_FALSE(r.ok()) << name;
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find(name), std::string::npos) << "error does not name the file: " << r.error().message;
    }
  }
  // Every truncation of a good file.
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(voice::parse_voice_file(good.substr(0, n), "cut").ok()) << n;
  // A size cap applies before parsing.
  voice::VoiceLimits small;
  small.max_file_bytes = 64;
  EXPECT_EQ(voice::parse_voice_file(good, "big", small).error().code, ErrorCode::kResourceExhausted);
  EXPECT_EQ(voice::read_voice_file(scratch_dir("voice_none") + "/missing.voice").error().code, ErrorCode::kNotFound);
}

TEST(VoiceFile, ModelCompatibility) {
  const qwen3_tts::Config& c = tiny_base_files().config;  // hidden 32, 16 groups, codebook 2048
  Voice v = sample_voice();
  EXPECT_TRUE(qwen3_tts::check_voice_for_model(v, c, "v").ok());
  Voice w = v;
  w.x_vector.push_back(0);
  EXPECT_EQ(qwen3_tts::check_voice_for_model(w, c, "v").error().code, ErrorCode::kShapeMismatch);
  w = v;
  w.ref_codes[7] = 2048;
  EXPECT_EQ(qwen3_tts::check_voice_for_model(w, c, "v").error().code, ErrorCode::kOutOfRange);
  w = v;
  w.codebooks = 8;
  w.frames = 6;
  EXPECT_EQ(qwen3_tts::check_voice_for_model(w, c, "v").error().code, ErrorCode::kShapeMismatch);
}

}  // namespace
}  // namespace chorus::test
