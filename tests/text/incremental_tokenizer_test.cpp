// IncrementalTokenizer against the one-shot tokenizer: the golden texts (and the Qwen3-TTS wrapping
// around them) cut into random deltas, splits inside multi-byte characters included, must give
// exactly the ids of tokenizing the whole text, and no id handed out may ever be contradicted by
// any continuation of the text.
#include <gtest/gtest.h>

#include <random>

#include "text/incremental_tokenizer.h"
#include "text/tokenizer_fixture.h"

namespace chorus::test {
namespace {

using text::IncrementalTokenizer;
using text::Qwen2Tokenizer;

// Continuations that would change the tokens of a careless cut: letters joining a word, contraction
// tails, whitespace and newline runs, combining marks that NFC composes, digits, CJK, specials.
const std::vector<std::string>& continuations() {
  static const std::vector<std::string> c = {
      "s", "'ll", "'S", " ", "  ", "\n", "\n\n", " \n", "\t", "\xCC\x81", "\xCC\xA3\xCC\x82", "9", "12",
      "!", "?!", ".", "\xEF\xBC\x8C", "\xE4\xB8\x96\xE7\x95\x8C", "\xE3\x80\x82", "|>", "_end|>", "\xF0\x9F",
      "\x80", "<|im_end|>", "x y", "\xC2\xA0"};
  return c;
}

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

struct ChunkedRun {
  std::vector<int32_t> ids;
  size_t released_before_finish = 0;
  bool prefix_ok = true;
  std::string first_violation;
};

// Feeds `text` in random deltas of 1..max_len bytes; after every delta checks the released ids
// against the full text and, for `probe` of the deltas, against every continuation above.
ChunkedRun run_chunked(const Qwen2Tokenizer& tok, const std::string& text, std::mt19937& rng, size_t max_len,
                       bool probe) {
  IncrementalTokenizer inc(tok);
  ChunkedRun r;
  const std::vector<int32_t> whole = tok.encode(text);
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = std::min(text.size() - at, std::uniform_int_distribution<size_t>(1, max_len)(rng));
    inc.append(std::string_view(text).substr(at, n), &r.ids);
    at += n;
    if (!is_prefix(r.ids, whole)) {
      r.prefix_ok = false;
      r.first_violation = "full text, after " + std::to_string(at) + " bytes";
    }
    if (probe)
      for (const std::string& c : continuations())
        if (!is_prefix(r.ids, tok.encode(text.substr(0, at) + c)) && r.prefix_ok) {
          r.prefix_ok = false;
          r.first_violation = "'" + text.substr(0, at) + "' + '" + c + "'";
        }
  }
  r.released_before_finish = r.ids.size();
  inc.finish(&r.ids);
  return r;
}

std::vector<std::string> test_texts() {
  std::vector<std::string> texts;
  for (const GoldenLine& g : golden_lines()) texts.push_back(g.text);
  // The wrapping the Qwen3-TTS engine puts around a request's text.
  for (const GoldenLine& g : golden_lines())
    if (g.category != "special_tokens") texts.push_back("<|im_start|>assistant\n" + g.text + "<|im_end|>\n<|im_start|>assistant\n");
  texts.push_back("I'll say it: don't, won't, you're.  Twice\n\n  spaced;\ttabs\r\nand 12345 digits, 3.14!");
  texts.push_back("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82\xE4\xBB\x8A\xE5\xA4\xA9"
                  "\xE5\xA4\xA9\xE6\xB0\x94\xE5\xBE\x88\xE5\xA5\xBD\xEF\xBC\x81 OK?");
  texts.push_back("Cafe\xCC\x81 na\xC3\xAFve e\xCC\xA3\xCC\x82 \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD done.");
  texts.push_back("bad \xE4\xB8 bytes \xFF here, <|im_end|> inside<tts_pad>text.");
  return texts;
}

TEST(IncrementalTokenizer, RandomChunkingsEqualTheWholeText) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = test_texts();
  ASSERT_GT(texts.size(), 790u);
  size_t runs = 0, released_early = 0, total_ids = 0, failures = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < texts.size(); ++i) {
      const size_t max_len = seed % 3 == 0 ? 1 : seed % 3 == 1 ? 4 : 16;  // byte by byte, too
      const ChunkedRun r = run_chunked(*tok, texts[i], rng, max_len, /*probe=*/seed < 1);
      const std::vector<int32_t> whole = tok->encode(texts[i]);
      ++runs;
      total_ids += whole.size();
      released_early += r.released_before_finish;
      if (r.ids != whole || !r.prefix_ok) ++failures;
      EXPECT_EQ(r.ids, whole) << "seed " << seed << ": " << texts[i];
      EXPECT_TRUE(r.prefix_ok) << "seed " << seed << ": an id was released that " << r.first_violation
                               << " contradicts";
    }
  }
  EXPECT_EQ(failures, 0u);
  EXPECT_GT(runs, 4000u);
  // Not vacuous: most ids are released before finish() (only each text's tail waits).
  EXPECT_GT(released_early * 2, total_ids) << released_early << " of " << total_ids;
}

TEST(IncrementalTokenizer, ReleasesWordsAsTheyComplete) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  IncrementalTokenizer inc(*tok);
  std::vector<int32_t> ids;
  inc.append("Hello, wor", &ids);
  EXPECT_EQ(ids, tok->encode("Hello,"));  // " wor" may still grow
  inc.append("ld", &ids);
  EXPECT_EQ(ids, tok->encode("Hello,"));
  inc.append("! And", &ids);
  EXPECT_EQ(ids, tok->encode("Hello, world!"));
  inc.finish(&ids);
  EXPECT_EQ(ids, tok->encode("Hello, world! And"));
  // Chinese punctuation cuts too.
  IncrementalTokenizer zh(*tok);
  ids.clear();
  zh.append("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96", &ids);  // 你好，世
  EXPECT_EQ(ids, tok->encode("\xE4\xBD\xA0\xE5\xA5\xBD"));
}

// The cut rules are what make this exact: cutting at every pre-tokenizer piece boundary but the
// last (a plausible shortcut) is contradicted by the checks above, so they can fail.
TEST(IncrementalTokenizer, ANaiveCutIsCaught) {
  const Qwen2Tokenizer* tok = qwen3_tts_tokenizer();
  ASSERT_NE(tok, nullptr);
  // "a\n " then "\n": the pieces were "a" "\n" " ", the whole gives "a" "\n \n".
  const std::vector<int32_t> naive = tok->encode("a\n");
  EXPECT_FALSE(is_prefix(naive, tok->encode("a\n \n")));
  IncrementalTokenizer inc(*tok);
  std::vector<int32_t> ids;
  inc.append("a\n ", &ids);
  EXPECT_TRUE(is_prefix(ids, tok->encode("a\n \n")));
  // Cutting inside an added token's text would split it: "<|im" + "_end|>".
  EXPECT_FALSE(is_prefix(tok->encode("x <|im"), tok->encode("x <|im_end|>")));
  EXPECT_EQ(inc.last_cut("x <|im_end"), 1u);
}

TEST(IncrementalTokenizer, OtherSplitRegexReleasesOnlyAtFinish) {
  auto tok = Qwen2Tokenizer::load(mistral_fix_tokenizer_json_folder());
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  std::mt19937 rng(7);
  for (const GoldenLine& g : mistral_fix_golden_lines()) {
    const ChunkedRun r = run_chunked(*tok, g.text, rng, 5, false);
    EXPECT_EQ(r.released_before_finish, 0u);
    EXPECT_EQ(r.ids, g.ids) << g.text;
  }
}

}  // namespace
}  // namespace chorus::test
