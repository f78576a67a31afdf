// Strict JSON parsing and the bounded config getters.
#include <gtest/gtest.h>

#include <random>

#include "io/json_util.h"
#include "io/st_bytes.h"
#include "support/test_support.h"

namespace chorus::io {
namespace {

// Naive UTF-8 encoder for the validator tests (no validation of its own).
std::string encode(uint32_t cp, int len) {
  std::string s;
  if (len == 1) {
    s += static_cast<char>(cp);
  } else {
    static const unsigned char kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    s += static_cast<char>(kLead[len] | (cp >> (6 * (len - 1))));
    for (int i = len - 2; i >= 0; --i) s += static_cast<char>(0x80 | ((cp >> (6 * i)) & 0x3F));
  }
  return s;
}

int shortest_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

TEST(Utf8, AcceptsEveryScalarValueAndRejectsSurrogatesAndOverlongs) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    const int len = shortest_len(cp);
    ASSERT_EQ(is_valid_utf8(encode(cp, len)), !surrogate) << std::hex << cp;
    if (len < 4) {
      ASSERT_FALSE(is_valid_utf8(encode(cp, len + 1))) << "overlong " << std::hex << cp;
    }
  }
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(is_valid_utf8("\xF8\x88\x80\x80\x80"));
  EXPECT_FALSE(is_valid_utf8("\x80"));
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));  // cut short
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));
}

// Reference: the Unicode Standard's table of well-formed byte sequences (Table 3-7), checked
// sequence by sequence: a different formulation from the decoder under test.
bool well_formed_by_table(const std::string& s) {
  struct Row {
    unsigned char lo[4], hi[4];
    int len;
  };
  static const Row kRows[] = {
      {{0x00}, {0x7F}, 1},
      {{0xC2, 0x80}, {0xDF, 0xBF}, 2},
      {{0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}, 3},
      {{0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}, 3},
      {{0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}, 3},
      {{0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}, 3},
      {{0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}, 4},
      {{0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}, 4},
      {{0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}, 4},
  };
  size_t i = 0;
  while (i < s.size()) {
    int matched = 0;
    for (const Row& r : kRows) {
      if (i + r.len > s.size()) continue;
      bool ok = true;
      for (int k = 0; k < r.len && ok; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        ok = b >= r.lo[k] && b <= r.hi[k];
      }
      if (ok) {
        matched = r.len;
        break;
      }
    }
    if (!matched) return false;
    i += matched;
  }
  return true;
}

TEST(Utf8, AgreesWithTheStandardsTableOnRandomBytes) {
  auto reference = well_formed_by_table;
  std::mt19937 rng(5);
  int valid = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string s(1 + rng() % 6, '\0');
    for (char& c : s) {
      const unsigned r = rng();
      // Bias towards lead and continuation bytes so that multi-byte sequences are common.
      c = static_cast<char>(r % 4 == 0 ? (r >> 8) & 0x7F : (r % 4 == 1 ? 0x80 | ((r >> 8) & 0x3F) : (r >> 8) & 0xFF));
    }
    const bool expected = reference(s);
    valid += expected;
    ASSERT_EQ(is_valid_utf8(s), expected) << testing::PrintToString(s);
  }
  EXPECT_GT(valid, 10000);  // both outcomes well represented
  EXPECT_LT(valid, 190000);
}

TEST(ParseJson, RejectsDuplicatesDepthSizeAndBadBytes) {
  struct Case {
    std::string text;
    ErrorCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"a":1,"a":2})", ErrorCode::kInvalidFormat, "c.json: duplicate key 'a'"},
      {R"({"x":{"b":[{"k":1,"k":1}]}})", ErrorCode::kInvalidFormat, "duplicate key 'k'"},
      {std::string(65, '[') + std::string(65, ']'), ErrorCode::kResourceExhausted, "nested deeper than 64 levels"},
      {"{\"a\":\"\xff\"}", ErrorCode::kInvalidFormat, "c.json: not valid UTF-8"},
      {std::string("{}\0{}", 5), ErrorCode::kInvalidFormat, "NUL byte at offset 2"},
      {"{} x", ErrorCode::kInvalidFormat, "c.json: not valid JSON at byte"},
      {R"({"a":1e999})", ErrorCode::kInvalidFormat, "not valid JSON"},
      {"", ErrorCode::kInvalidFormat, "not valid JSON"},
      {std::string(1000, ' ') + "1", ErrorCode::kResourceExhausted, "1001 bytes of JSON, more than the 1000-byte limit"},
  };
  JsonLimits limits;
  limits.max_bytes = 1000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text.substr(0, 40));
    auto r = parse_json(c.text, "c.json", limits);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(error_code_name(r.error().code), std::string(error_code_name(c.code)));
    EXPECT_NE(r.error().message.find(c.message), std::string::npos) << r.error().message;
  }
  // At the limits: exactly 64 levels and exactly 1000 bytes parse.
  EXPECT_TRUE(parse_json(std::string(64, '[') + std::string(64, ']'), "c.json", limits).ok());
  auto full = parse_json(std::string(999, ' ') + "7", "c.json", limits);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->get<int>(), 7);
}

TEST(ParseJson, BuildsTheSameDocumentAsNlohmann) {
  const std::string text = R"({"b":[1,-2,3.5,true,null,"s\u00e9",{"x":[]}],"a":{"n":18446744073709551615},"c":""})";
  auto r = parse_json(text, "c.json");
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, Json::parse(text));
  EXPECT_EQ(r->dump(), Json::parse(text).dump());
}

TEST(ReadJsonFile, ReportsMissingOversizedAndNonRegularFiles) {
  const std::string dir = test::scratch_dir("io_read_json");
  auto missing = read_json_file(dir + "/none.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  test::write_bytes(dir + "/big.json", std::string(200, ' ') + "{}");
  JsonLimits limits;
  limits.max_bytes = 100;
  auto big = read_json_file(dir + "/big.json", limits);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(big.error().message.find(dir + "/big.json: file is 202 bytes"), std::string::npos);
  auto directory = read_json_file(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().code, ErrorCode::kIo);
  test::write_bytes(dir + "/ok.json", R"({"k":[1,2]})");
  auto ok = read_json_file(dir + "/ok.json");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["k"][1].get<int>(), 2);
}

class Getters : public testing::Test {
 protected:
  void SetUp() override {
    auto j = parse_json(R"({
      "model_type": "qwen3_tts", "flag": true, "eps": 1e-06, "theta": 1000000, "sw": null,
      "big": 18446744073709551615, "two": 2.0, "half": 2.5, "neg": -3,
      "talker_config": {"num_hidden_layers": 1000000000, "hidden_size": 32, "mrope_section": [4, 2, 2],
                        "spk_id": {"ryan": 3061, "bad": -1}, "layer_types": ["full", "full"],
                        "mixed": ["a", 1], "deep": {"inner": {"x": "y"}}}
    })", "config.json");
    ASSERT_TRUE(j.ok()) << j.error().to_string();
    json_ = std::move(*j);
    auto root = JsonObject::root(json_, "config.json");
    ASSERT_TRUE(root.ok());
    root_.emplace(*root);
    auto talker = root_->object("talker_config");
    ASSERT_TRUE(talker.ok());
    talker_.emplace(*talker);
  }

  template <class R>
  static void expect_error(const R& r, ErrorCode code, const std::string& message) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(error_code_name(r.error().code), std::string(error_code_name(code)));
    EXPECT_EQ(r.error().message, message);
  }

  Json json_;
  std::optional<JsonObject> root_, talker_;
};

TEST_F(Getters, IntegersAreBoundedAndNamedByPath) {
  expect_error(talker_->get_int("num_hidden_layers", 1, 512), ErrorCode::kOutOfRange,
               "config.json: talker_config.num_hidden_layers = 1000000000 is out of range [1, 512]");
  EXPECT_EQ(*talker_->get_int("hidden_size", 1, 65536), 32);
  EXPECT_EQ(*root_->get_int("two", 0, 10), 2);
  EXPECT_EQ(*root_->get_int("neg", -5, 0), -3);
  EXPECT_EQ(*root_->get_int("absent", 0, 10, 7), 7);
  EXPECT_EQ(*root_->get_int("sw", 0, 10, 4), 4);  // null counts as absent
  expect_error(root_->get_int("sw", 0, 10), ErrorCode::kInvalidFormat, "config.json: sw is missing");
  expect_error(root_->get_int("half", 0, 10), ErrorCode::kOutOfRange, "config.json: half = 2.5 is out of range [0, 10]");
  expect_error(root_->get_int("big", 0, INT64_MAX), ErrorCode::kOutOfRange,
               "config.json: big = 18446744073709551615 is out of range [0, 9223372036854775807]");
  expect_error(root_->get_int("model_type", 0, 10), ErrorCode::kInvalidFormat,
               "config.json: model_type must be an integer, not a string");
  expect_error(talker_->get_int("missing", 0, 1), ErrorCode::kInvalidFormat, "config.json: talker_config.missing is missing");
}

TEST_F(Getters, FloatsBoolsAndStrings) {
  EXPECT_EQ(*root_->get_float("eps", 0, 1), 1e-6);
  EXPECT_EQ(*root_->get_float("theta", 1, 1e9), 1e6);  // an integer is a fine float
  EXPECT_EQ(*root_->get_float("absent", 0, 1, 0.5), 0.5);
  expect_error(root_->get_float("theta", 1, 1000), ErrorCode::kOutOfRange,
               "config.json: theta = 1000000 is out of range [1, 1000]");
  expect_error(root_->get_float("flag", 0, 1), ErrorCode::kInvalidFormat, "config.json: flag must be a number, not a boolean");
  EXPECT_TRUE(*root_->get_bool("flag"));
  EXPECT_FALSE(*root_->get_bool("absent", false));
  expect_error(root_->get_bool("eps"), ErrorCode::kInvalidFormat, "config.json: eps must be true or false, not a number (1e-06)");
  EXPECT_EQ(*root_->get_string("model_type"), "qwen3_tts");
  EXPECT_EQ(*root_->get_string("absent", std::string("x")), "x");
  expect_error(root_->get_string("neg"), ErrorCode::kInvalidFormat, "config.json: neg must be a string, not an integer");
}

TEST_F(Getters, ArraysMapsAndNestedObjects) {
  EXPECT_EQ(*talker_->get_int_array("mrope_section", 0, 64, 3, 3), (std::vector<int64_t>{4, 2, 2}));
  expect_error(talker_->get_int_array("mrope_section", 0, 64, 1, 2), ErrorCode::kOutOfRange,
               "config.json: talker_config.mrope_section has 3 elements, expected 1 to 2");
  expect_error(talker_->get_int_array("mrope_section", 3, 64, 3, 3), ErrorCode::kOutOfRange,
               "config.json: talker_config.mrope_section[1] = 2 is out of range [3, 64]");
  expect_error(talker_->get_int_array("layer_types", 0, 1, 0, 9), ErrorCode::kInvalidFormat,
               "config.json: talker_config.layer_types[0] must be an integer, not a string");
  EXPECT_EQ(*talker_->get_int_array("absent", 0, 1, 0, 9, std::vector<int64_t>{1}), (std::vector<int64_t>{1}));
  EXPECT_EQ(*talker_->get_string_array("layer_types", 8), (std::vector<std::string>{"full", "full"}));
  expect_error(talker_->get_string_array("layer_types", 1), ErrorCode::kOutOfRange,
               "config.json: talker_config.layer_types has 2 elements, more than 1");
  expect_error(talker_->get_string_array("mixed", 8), ErrorCode::kInvalidFormat,
               "config.json: talker_config.mixed[1] must be a string, not an integer");
  expect_error(talker_->get_int_map("spk_id", 0, 4096, 100), ErrorCode::kOutOfRange,
               "config.json: talker_config.spk_id.bad = -1 is out of range [0, 4096]");
  auto spk = talker_->get_int_map("spk_id", -1, 4096, 100);
  ASSERT_TRUE(spk.ok());
  EXPECT_EQ(spk->at("ryan"), 3061);
  expect_error(talker_->get_int_map("spk_id", -1, 4096, 1), ErrorCode::kOutOfRange,
               "config.json: talker_config.spk_id has 2 entries, more than 1");

  auto inner = talker_->object("deep");
  ASSERT_TRUE(inner.ok());
  auto inner2 = inner->object("inner");
  ASSERT_TRUE(inner2.ok());
  expect_error(inner2->get_int("x", 0, 1), ErrorCode::kInvalidFormat,
               "config.json: talker_config.deep.inner.x must be an integer, not a string");
  auto opt = root_->optional_object("absent");
  ASSERT_TRUE(opt.ok());
  EXPECT_FALSE(opt->has_value());
  auto sw = root_->optional_object("sw");
  ASSERT_TRUE(sw.ok());
  EXPECT_FALSE(sw->has_value());
  expect_error(root_->object("flag"), ErrorCode::kInvalidFormat, "config.json: flag must be an object, not a boolean");
  EXPECT_TRUE(root_->has("flag"));
  EXPECT_FALSE(root_->has("sw"));
  expect_error(JsonObject::root(Json::array(), "x.json"), ErrorCode::kInvalidFormat,
               "x.json: must be a JSON object, not an array");
}

}  // namespace
}  // namespace chorus::io
