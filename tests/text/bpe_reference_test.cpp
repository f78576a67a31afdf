// BpeModel against a naive BPE written here from the textbook algorithm (GPT-2's bpe(): find the
// adjacent pair with the lowest merge rank, merge every occurrence left to right, repeat), on
// strings of byte-level symbols, reading vocab.json and merges.txt on its own.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "support/test_support.h"
#include "text/bpe_model.h"
#include "text/byte_level.h"
#include "text/tokenizer_fixture.h"

namespace chorus::test {
namespace {

struct NaiveBpe {
  std::map<std::pair<std::string, std::string>, std::size_t> ranks;
  std::map<std::string, std::int32_t> vocab;

  NaiveBpe() {
    std::ifstream merges(reference_path("qwen2_tokenizer/merges.txt"));
    std::string line;
    while (std::getline(merges, line)) {
      const auto sp = line.find(' ');
      ranks.emplace(std::make_pair(line.substr(0, sp), line.substr(sp + 1)), ranks.size());
    }
    std::ifstream v(reference_path("qwen2_tokenizer/vocab.json"));
    const nlohmann::json parsed = nlohmann::json::parse(v);
    for (const auto& [token, id] : parsed.items()) vocab[token] = id.get<std::int32_t>();
  }

  std::vector<std::int32_t> encode(const std::string& bytes) const {
    std::vector<std::string> word;
    for (unsigned char b : bytes) word.push_back(text::to_byte_level(std::string(1, static_cast<char>(b))));
    while (word.size() > 1) {
      std::size_t best = SIZE_MAX;
      std::pair<std::string, std::string> best_pair;
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = ranks.find({word[i], word[i + 1]});
        if (it != ranks.end() && it->second < best) {
          best = it->second;
          best_pair = it->first;
        }
      }
      if (best == SIZE_MAX) break;
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == best_pair.first && word[i + 1] == best_pair.second) {
          merged.push_back(word[i] + word[i + 1]);
          i += 2;
        } else {
          merged.push_back(word[i++]);
        }
      }
      word = std::move(merged);
    }
    std::vector<std::int32_t> ids;
    for (const auto& w : word) ids.push_back(vocab.at(w));
    return ids;
  }
};

TEST(BpeReference, MatchesNaiveBpeOnWordsAndRandomBytes) {
  auto def = text::read_tokenizer_folder(qwen3_tts_tokenizer_folder());
  ASSERT_TRUE(def.ok()) << def.error().to_string();
  auto model = text::BpeModel::build(*def);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  const NaiveBpe naive;
  ASSERT_EQ(naive.ranks.size(), 151387u);

  std::vector<std::string> pieces;
  for (const GoldenLine& g : golden_lines()) {  // words, with and without their leading space
    std::istringstream words(g.text);
    for (std::string w; words >> w;) {
      pieces.push_back(w);
      pieces.push_back(" " + w);
    }
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 3000; ++i) {  // random bytes, and random runs over a small alphabet (many merges)
    std::string s(1 + rng() % 48, '\0');
    const bool small_alphabet = i % 2 == 0;
    for (char& c : s) c = static_cast<char>(small_alphabet ? "aeinst "[rng() % 7] : rng() % 256);
    pieces.push_back(s);
  }
  std::string long_piece;  // longer than the short-piece path
  for (int i = 0; i < 3000; ++i) long_piece += "theination "[rng() % 11];
  pieces.push_back(long_piece);

  std::size_t merged_pieces = 0;
  for (const std::string& p : pieces) {
    std::vector<std::int32_t> ids;
    model->encode_piece(p, &ids);
    const auto expected = naive.encode(p);
    ASSERT_EQ(ids, expected) << "piece: " << p;
    if (expected.size() < p.size()) ++merged_pieces;
  }
  EXPECT_GT(merged_pieces, pieces.size() / 2);  // most pieces really exercise merging
}

}  // namespace
}  // namespace chorus::test
