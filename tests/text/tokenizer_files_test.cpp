// Loading: hostile or unsupported files give a typed error (RELIABILITY.md §1.5), and a tiny
// hand-made BPE gives the ids worked out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_support.h"
#include "text/byte_level.h"
#include "text/normalize.h"
#include "text/qwen2_tokenizer.h"
#include "text/tokenizer_definition.h"
#include "text/utf8.h"

namespace chorus::test {
namespace {

using text::parse_tokenizer_json;
using text::parse_vocab_and_merges;

// A vocabulary of the 256 byte-level symbols (ids 0..255 in byte order) plus extra tokens.
std::string byte_vocab(const std::string& extra) {
  std::string v = "{";
  for (int b = 0; b < 256; ++b) {
    const std::string sym = text::to_byte_level(std::string(1, static_cast<char>(b)));
    std::string escaped;
    for (char c : sym) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += c;
    }
    v += (b > 0 ? ",\"" : "\"") + escaped + "\": " + std::to_string(b);
  }
  v += (extra.empty() ? "" : ", ") + extra + "}";
  return v;
}

const char kNoConfig[] = "{}";

Result<text::Qwen2Tokenizer> tiny(const std::string& extra_vocab, const std::string& merges,
                                  const std::string& config = kNoConfig) {
  CHORUS_ASSIGN(auto def, parse_vocab_and_merges(byte_vocab(extra_vocab), merges, config));
  return text::Qwen2Tokenizer::from_definition(def);
}

TEST(TokenizerFiles, TinyBpeMergesByRank) {
  // "ab" (256) first, then "abc" (257); "bc" (258) has a worse rank than "ab", so "abc" wins.
  auto tok = tiny(R"("ab": 256, "abc": 257, "bc": 258)", "#version: 0.2\na b\nab c\nb c\n");
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->encode("abc"), (std::vector<std::int32_t>{257}));
  EXPECT_EQ(tok->encode("bc"), (std::vector<std::int32_t>{258}));
  EXPECT_EQ(tok->encode("abab"), (std::vector<std::int32_t>{256, 256}));
  EXPECT_EQ(tok->encode("xbc"), (std::vector<std::int32_t>{'x', 258}));
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{257, 258}), "abcbc");
}

TEST(TokenizerFiles, RepeatedMergeKeepsItsLastRank) {
  // "b c" is listed before and after "a b": Hugging Face keeps the later rank, so "ab" goes first.
  auto tok = tiny(R"("ab": 256, "bc": 257)", "b c\na b\nb c\n");
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->encode("abc"), (std::vector<std::int32_t>{256, 'c'}));
}

TEST(TokenizerFiles, AddedTokensFromConfig) {
  const std::string config = R"({"added_tokens_decoder": {
      "300": {"content": "<x>", "special": true, "normalized": false},
      "301": {"content": "<xy>", "special": true, "normalized": false}}})";
  auto tok = tiny("", "", config);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->encode("a<xy><x>"), (std::vector<std::int32_t>{'a', 301, 300}));  // longest match
  EXPECT_EQ(tok->token_id("<xy>"), 301);
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{301, 299, 300}), "<xy><x>");     // 299 is no token
}

void expect_error(const Result<text::TokenizerDefinition>& r, ErrorCode code, const std::string& fragment) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, code) << r.error().to_string();
  EXPECT_NE(r.error().message.find(fragment), std::string::npos) << r.error().to_string();
}

TEST(TokenizerFiles, HostileVocabAndMergesAreRejected) {
  expect_error(parse_vocab_and_merges("{", "", "{}"), ErrorCode::kInvalidFormat, "not valid JSON");
  expect_error(parse_vocab_and_merges(std::string(100, '[') + std::string(100, ']'), "", "{}"),
               ErrorCode::kInvalidFormat, "nested");
  expect_error(parse_vocab_and_merges(R"({"a": -1})", "", "{}"), ErrorCode::kInvalidFormat, "'a'");
  expect_error(parse_vocab_and_merges(R"({"a": 1.5})", "", "{}"), ErrorCode::kInvalidFormat, "'a'");
  expect_error(parse_vocab_and_merges(R"({"a": 99999999999})", "", "{}"), ErrorCode::kInvalidFormat, "'a'");
  expect_error(parse_vocab_and_merges(R"({"a": "1"})", "", "{}"), ErrorCode::kInvalidFormat, "'a'");
  expect_error(parse_vocab_and_merges("{}", "a b c\n", "{}"), ErrorCode::kInvalidFormat, "line 1");
  expect_error(parse_vocab_and_merges("{}", "x y\nab\n", "{}"), ErrorCode::kInvalidFormat, "line 2");
  expect_error(parse_vocab_and_merges("{}", "", R"({"added_tokens_decoder": {"-5": {"content": "x"}}})"),
               ErrorCode::kInvalidFormat, "-5");
  expect_error(parse_vocab_and_merges("{}", "", R"({"added_tokens_decoder": {"5": {"content": ""}}})"),
               ErrorCode::kInvalidFormat, "empty");
  expect_error(parse_vocab_and_merges("{}", "", R"({"added_tokens_decoder": {"5": {"content": "x", "lstrip": true}}})"),
               ErrorCode::kUnsupported, "lstrip");
}

void expect_build_error(const std::string& vocab, const std::string& merges, const std::string& config,
                        const std::string& fragment) {
  auto def = parse_vocab_and_merges(vocab, merges, config);
  ASSERT_TRUE(def.ok()) << def.error().to_string();
  auto tok = text::Qwen2Tokenizer::from_definition(*def);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.error().code, ErrorCode::kInvalidFormat);
  EXPECT_NE(tok.error().message.find(fragment), std::string::npos) << tok.error().to_string();
}

TEST(TokenizerFiles, MergesAndIdsAreCheckedAgainstTheVocabulary) {
  expect_build_error(byte_vocab(""), "a b\n", "{}", "merge 1");                      // result "ab" missing
  expect_build_error(byte_vocab(R"("ab": 256)"), "a b\nq zz\n", "{}", "merge 2");     // part "zz" missing
  expect_build_error(byte_vocab(R"("ab": 255)"), "", "{}", "id 255");               // duplicate id
  expect_build_error(byte_vocab(R"("ab": 256)"), "", R"({"added_tokens_decoder": {"256": {"content": "<s>"}}})",
                     "id 256");                                                     // added id clash
  expect_build_error("{}", "", "{}", "empty");
}

std::string tokenizer_json(const std::string& pre_tokenizer, const std::string& extra = "") {
  return R"({"added_tokens": [], "normalizer": {"type": "NFC"}, "pre_tokenizer": )" + pre_tokenizer +
         R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
         "merges": [["a", "b"]])" + extra + "}}";
}

const char kQwenPre[] =
    R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";

TEST(TokenizerFiles, TokenizerJsonLayoutsAndRefusals) {
  auto ok = parse_tokenizer_json(tokenizer_json(kQwenPre));
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(ok->split_regex, "\\p{L}+");
  EXPECT_EQ(ok->merges.size(), 1u);
  auto tok = text::Qwen2Tokenizer::from_definition(*ok);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(tok->encode("ab ab"), (std::vector<std::int32_t>{2, 2}));  // the space has no token: dropped

  expect_error(parse_tokenizer_json(tokenizer_json(R"({"type": "Whitespace"})")), ErrorCode::kUnsupported,
               "pre-tokenizer");
  expect_error(parse_tokenizer_json(tokenizer_json(kQwenPre, R"(, "byte_fallback": true)")), ErrorCode::kUnsupported,
               "byte_fallback");
  expect_error(parse_tokenizer_json(tokenizer_json(kQwenPre, R"(, "unk_token": "<unk>")")), ErrorCode::kUnsupported,
               "unk_token");
  expect_error(parse_tokenizer_json(tokenizer_json(kQwenPre, R"(, "dropout": 0.1)")), ErrorCode::kUnsupported,
               "dropout");
  expect_error(parse_tokenizer_json("[1, 2]"), ErrorCode::kInvalidFormat, "not a JSON object");
  expect_error(parse_tokenizer_json("\xFF"), ErrorCode::kInvalidFormat, "not valid JSON");

  std::string bad_regex = kQwenPre;
  bad_regex.replace(bad_regex.find("\\\\p{L}+"), 7, "(unclosed");
  auto def = parse_tokenizer_json(tokenizer_json(bad_regex));
  ASSERT_TRUE(def.ok()) << def.error().to_string();
  auto compiled = text::Qwen2Tokenizer::from_definition(*def);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.error().code, ErrorCode::kInvalidFormat);
}

TEST(TokenizerFiles, MissingFilesAreNotFound) {
  auto none = text::Qwen2Tokenizer::load(scratch_dir("tokenizer_no_such") + "/missing");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  const std::string dir = scratch_dir("tokenizer_only_vocab");
  std::ofstream(dir + "/vocab.json") << "{}";
  auto partial = text::Qwen2Tokenizer::load(dir);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.error().code, ErrorCode::kNotFound);
  EXPECT_NE(partial.error().message.find("merges.txt"), std::string::npos);
}

// is_certainly_nfc() lets encode skip utf8proc; it must never claim NFC for text that NFC changes.
// Checked for every code point alone, after a letter and before a combining acute accent.
TEST(TokenizerFiles, NfcShortcutNeverSkipsNeededNormalisation) {
  std::size_t inert = 0;
  for (char32_t c = 1; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string u;
    if (c < 0x80) {
      u = std::string(1, static_cast<char>(c));
    } else if (c < 0x800) {
      u = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    } else if (c < 0x10000) {
      u = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
           static_cast<char>(0x80 | (c & 0x3F))};
    } else {
      u = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
           static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    for (const std::string& s : {u, "A" + u, "\xEA\xB0\x80" + u}) {  // alone, after "A", after Hangul "가"
      if (!text::is_certainly_nfc(s)) continue;
      std::string n;
      ASSERT_TRUE(text::nfc(s, &n));
      ASSERT_EQ(n, s) << "U+" << std::hex << static_cast<std::uint32_t>(c);
    }
    if (text::is_certainly_nfc(u)) ++inert;
  }
  EXPECT_GT(inert, 100000u);
  EXPECT_FALSE(text::is_certainly_nfc("e\xCC\x81"));  // e + U+0301
  EXPECT_FALSE(text::is_certainly_nfc("\xE1\x84\x80\xE1\x85\xA1"));  // conjoining jamo
}

}  // namespace
}  // namespace chorus::test

namespace chorus::test {
namespace {

// A vocabulary may lack byte symbols (fuzzed files do): such pieces have no ids, and caching an
// empty id list must be well defined (UBSan once caught memcpy from a null pointer here).
TEST(TokenizerFiles, PiecesWithoutIdsAreCachedSafely) {
  auto def = parse_vocab_and_merges(R"({"a": 0, "b": 1})", "", kNoConfig);
  ASSERT_TRUE(def.ok()) << def.error().to_string();
  auto tok = text::Qwen2Tokenizer::from_definition(*def);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  for (int round = 0; round < 2; ++round) {  // the second round reads the cache
    EXPECT_EQ(tok->encode("zz"), (std::vector<std::int32_t>{})) << "round " << round;
    EXPECT_EQ(tok->encode("ab zz"), (std::vector<std::int32_t>{0, 1})) << "round " << round;
  }
}

}  // namespace
}  // namespace chorus::test
