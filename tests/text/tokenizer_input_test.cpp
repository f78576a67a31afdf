// Bad and extreme input: invalid UTF-8, empty text, text of 10 MB and more, unknown ids in decode.
// Expected values come from the Unicode Standard (§3.9, "U+FFFD substitution of maximal subparts"),
// golden.jsonl and the README's token ids, never from our own output.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <thread>

#include "text/qwen2_tokenizer.h"
#include "text/tokenizer_fixture.h"
#include "text/utf8.h"

namespace chorus::test {
namespace {

using text::Qwen2Tokenizer;

const std::string kFffd = "\xEF\xBF\xBD";

std::string repeat(const std::string& s, std::size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

// The worked examples of the Unicode Standard, chapter 3 (tables 3-8 to 3-11).
TEST(Utf8Repair, MaximalSubpartsAsInTheUnicodeStandard) {
  EXPECT_EQ(text::to_valid_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + repeat(kFffd, 3) + "b" + kFffd + "c" + repeat(kFffd, 2) + "d");
  EXPECT_EQ(text::to_valid_utf8("\xC0\xAF\xE0\x80\xBF\xF0\x81\x82\x41"), repeat(kFffd, 8) + "A");
  EXPECT_EQ(text::to_valid_utf8("\xED\xA0\x80\xED\xBF\xBF\xED\xAF\x41"), repeat(kFffd, 8) + "A");
  EXPECT_EQ(text::to_valid_utf8("\xF4\x91\x92\x93\xFF\x41\x80\xBF\x42"), repeat(kFffd, 5) + "A" + repeat(kFffd, 2) + "B");
  EXPECT_EQ(text::to_valid_utf8("\xE1\x80\xE2\xF0\x91\x92\xF1\xBF\x41"), repeat(kFffd, 4) + "A");
}

TEST(Utf8Repair, ValidTextIsUnchanged) {
  for (const GoldenLine& g : golden_lines()) {
    ASSERT_TRUE(text::is_valid_utf8(g.text)) << g.text;
    ASSERT_EQ(text::to_valid_utf8(g.text), g.text);
  }
  EXPECT_FALSE(text::is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(text::is_valid_utf8("\xC1\xBF"));          // overlong
  EXPECT_TRUE(text::is_valid_utf8(std::string("a\0b", 3)));
}

// Invalid bytes tokenize exactly like U+FFFD, checked on every golden line that holds U+FFFD.
TEST(TokenizerInput, InvalidUtf8TokenizesAsReplacementCharacter) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  int checked = 0;
  for (const GoldenLine& g : golden_lines()) {
    if (g.text.find(kFffd) == std::string::npos) continue;
    std::string broken = g.text;
    for (std::size_t p; (p = broken.find(kFffd)) != std::string::npos;) broken.replace(p, 3, "\xFF");
    EXPECT_EQ(tok->encode(broken), g.ids) << g.text;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // A truncated 3-byte sequence is one ill-formed subpart, so one U+FFFD.
  EXPECT_EQ(tok->encode("\xE4\xBD"), tok->encode(kFffd));
  EXPECT_EQ(tok->encode("\xE4\xBD" "x"), tok->encode(kFffd + "x"));
}

TEST(TokenizerInput, EmptyTextGivesNoIds) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{}), "");
}

// A golden line that starts and ends with a letter, so "\n" between copies is its own piece.
const GoldenLine* plain_english_line() {
  for (const GoldenLine& g : golden_lines()) {
    if (g.category == "english" && g.text.size() > 20 && std::isalpha(static_cast<unsigned char>(g.text.front())) &&
        std::isalpha(static_cast<unsigned char>(g.text.back())))
      return &g;
  }
  return nullptr;
}

// One 10+ MB stretch of text without added tokens.
TEST(TokenizerInput, TenMegabytesOfRepeatedLines) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  const GoldenLine* g = plain_english_line();
  ASSERT_NE(g, nullptr);
  const std::size_t copies = (10u << 20) / (g->text.size() + 1) + 1;
  const std::string text = repeat(g->text + "\n", copies);
  ASSERT_GE(text.size(), 10u << 20);
  const auto ids = tok->encode(text);
  std::vector<std::int32_t> expected;
  for (std::size_t i = 0; i < copies; ++i) {
    expected.insert(expected.end(), g->ids.begin(), g->ids.end());
    expected.push_back(198);  // "\n"
  }
  ASSERT_EQ(ids.size(), expected.size());
  EXPECT_TRUE(ids == expected);
}

// Every golden line, joined by <|endoftext|>, many times over: each stretch is tokenized on its own.
TEST(TokenizerInput, TenMegabytesOfGoldenLinesBetweenSpecialTokens) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  std::string block;
  std::vector<std::int32_t> block_ids;
  for (const GoldenLine& g : golden_lines()) {
    block += g.text + "<|endoftext|>";
    block_ids.insert(block_ids.end(), g.ids.begin(), g.ids.end());
    block_ids.push_back(151643);
  }
  const std::size_t copies = (10u << 20) / block.size() + 1;
  const auto ids = tok->encode(repeat(block, copies));
  ASSERT_EQ(ids.size(), block_ids.size() * copies);
  for (std::size_t i = 0; i < copies; ++i)
    ASSERT_TRUE(std::equal(block_ids.begin(), block_ids.end(), ids.begin() + i * block_ids.size())) << "copy " << i;
}

// Degenerate pieces: one 1 MB word, 1 MB of spaces, 1 MB of digits, 1 MB of one CJK character. No reference exists for the
// ids, so check what must hold: they finish, and decode gives the text back.
TEST(TokenizerInput, HugeSinglePiecesRoundTrip) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  std::string word;
  for (std::size_t i = 0; word.size() < (1u << 20); ++i) word += static_cast<char>('a' + (i * 7 + i / 26) % 26);
  for (const std::string& text : {word, std::string(1u << 20, ' '), std::string(1u << 20, '7'),
                                  repeat("\xE4\xBD\xA0", 1u << 18)}) {
    const auto ids = tok->encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_LE(ids.size(), text.size());
    EXPECT_TRUE(tok->decode(ids) == text) << text.substr(0, 8);
  }
}

TEST(TokenizerInput, DecodeSkipsUnknownIdsAndRepairsPartialCharacters) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  // 9707 "Hello", 1879 " world"; -1, 151675 (past the added tokens) and 1 << 30 name no token.
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{-1, 9707, 151675, 1879, 1 << 30}), "Hello world");
  // "你" is E4 BD A0; the byte-level tokens of E4 and BD alone make one ill-formed subpart.
  const auto e4 = tok->token_id("\xC3\xA4"), bd = tok->token_id("\xC2\xBD");
  ASSERT_TRUE(e4 && bd);
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{*e4, *bd, 9707}), kFffd + "Hello");
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{*bd, *bd}), kFffd + kFffd);
  // Added tokens decode to their text.
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{151644, 77091, 198}), "<|im_start|>assistant\n");
}

TEST(TokenizerInput, ConcurrentEncodingAgreesWithGolden) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const auto& lines = golden_lines();
      for (int round = 0; round < 3; ++round) {
        for (std::size_t i = t; i < lines.size() + t; ++i) {
          const GoldenLine& g = lines[i % lines.size()];
          if (tok->encode(g.text) != g.ids) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace chorus::test
