// The SentencePiece wrapper on a model trained here with libsentencepiece's trainer. Expected ids
// come from the trained model's own vocabulary as the Debian `spm_export_vocab` tool lists it (an
// independent reader of the same file), never from the wrapper under test.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "support/test_support.h"
#include "text/sentencepiece_tokenizer.h"

namespace chorus::text {
namespace {

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> c = {
      "the cat sat on the mat and the dog sat on the log",
      "a warm voice reads the story to the children every night",
      "numbers such as 1234 and 56 are split into digits",
      "she said hello to the world and the world said hello back",
      "speech synthesis turns text into sound one frame at a time",
      "the quick brown fox jumps over the lazy dog",
      "hello hello hello world world",
  };
  return c;
}

struct Trained {
  std::string dir, model_path;
  std::map<std::string, int32_t> vocab;  // piece -> id, from spm_export_vocab
};

const Trained& trained() {
  static const Trained t = [] {
    Trained t;
    SentencePieceTrainOptions o;
    o.vocab_size = 320;
    o.user_defined_symbols = {"hello"};
    auto model = train_sentencepiece(corpus(), o);
    EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().to_string());
    t.dir = chorus::test::scratch_dir("spm_tokenizer");
    t.model_path = t.dir + "/tokenizer.model";
    std::ofstream(t.model_path, std::ios::binary) << (model.ok() ? *model : std::string());
    const std::string vocab_path = t.dir + "/vocab.tsv";
    const std::string cmd = "spm_export_vocab --model=" + t.model_path + " --output=" + vocab_path + " 2>/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(vocab_path);
    std::string line;
    int32_t id = 0;
    while (std::getline(in, line)) t.vocab[line.substr(0, line.find('\t'))] = id++;
    return t;
  }();
  return t;
}

TEST(SentencePiece, TrainedModelHasGemmaStyleControlIds) {
  const auto& v = trained().vocab;
  ASSERT_GT(v.size(), 256u + 4u);  // byte fallback pieces + controls + learned pieces
  EXPECT_EQ(v.at("<pad>"), 0);
  EXPECT_EQ(v.at("</s>"), 1);
  EXPECT_EQ(v.at("<s>"), 2);
  EXPECT_EQ(v.at("<unk>"), 3);
  auto tok = SentencePieceTokenizer::load(trained().model_path);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(static_cast<size_t>(tok->piece_count()), v.size());
}

TEST(SentencePiece, EncodesIntoPiecesOfTheModelAndRoundTrips) {
  auto tok = SentencePieceTokenizer::load(trained().model_path);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  const auto& v = trained().vocab;
  for (const std::string text : {"hello world", "the dog sat on the mat", "1234 cats", "Ünïcödé ☃ text", "  two  spaces "}) {
    SCOPED_TRACE(text);
    const auto ids = tok->encode(text);
    const auto pieces = tok->encode_pieces(text);
    ASSERT_EQ(ids.size(), pieces.size());
    ASSERT_FALSE(ids.empty());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(v.at(pieces[i]), ids[i]) << pieces[i];
    EXPECT_EQ(tok->decode(ids), text);
  }
  // The user-defined symbol is one piece; digits are split one per piece.
  const auto hello = tok->encode("hello");
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(hello[0], trained().vocab.at("hello"));
  EXPECT_EQ(tok->encode_pieces("1234"), (std::vector<std::string>{"1", "2", "3", "4"}));
  // Unseen characters fall back to their UTF-8 bytes.
  const auto snow = tok->encode_pieces("☃");
  EXPECT_EQ(snow, (std::vector<std::string>{"<0xE2>", "<0x98>", "<0x83>"}));
}

TEST(SentencePiece, AddedTokensAreMatchedFirstLeftmostLongest) {
  AddedTokens added = {{"[S0]", 500}, {"<ins_bos>", 510}, {"<ins_eos>", 511}, {"<ins", 600}};
  auto tok = SentencePieceTokenizer::load(trained().model_path, added);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  const auto ids = tok->encode("[S0]<ins_bos>warm<ins_eos>hello");
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids[0], 500);
  EXPECT_EQ(ids[1], 510);  // the longest of "<ins" and "<ins_bos>"
  EXPECT_EQ(ids[ids.size() - 2], 511);
  EXPECT_EQ(ids.back(), trained().vocab.at("hello"));
  // "warm" between the markers is SentencePiece's own encoding of "warm".
  auto plain = SentencePieceTokenizer::load(trained().model_path);
  ASSERT_TRUE(plain.ok());
  const auto warm = plain->encode("warm");
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 2, ids.end() - 2), warm);
  EXPECT_EQ(tok->decode(ids), "[S0]<ins_bos>warm<ins_eos>hello");
  EXPECT_EQ(tok->token_id("<ins_eos>"), 511);
  EXPECT_EQ(tok->token_id("hello"), trained().vocab.at("hello"));
  EXPECT_FALSE(tok->token_id("no-such-piece").has_value());
}

TEST(SentencePiece, InvalidUtf8IsRepairedNotFatal) {
  auto tok = SentencePieceTokenizer::load(trained().model_path);
  ASSERT_TRUE(tok.ok());
  const auto ids = tok->encode(std::string("ab\xff" "cd"));
  // U+FFFD is unseen in training, so it becomes its three bytes EF BF BD.
  EXPECT_EQ(tok->decode(ids), "ab\xEF\xBF\xBD" "cd");
}

TEST(SentencePiece, BadModelsAndOptionsAreErrors) {
  auto missing = SentencePieceTokenizer::load(trained().dir + "/nope.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto garbage = SentencePieceTokenizer::from_serialized("not a protobuf at all", "garbage");
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.error().code, ErrorCode::kInvalidFormat);
  auto dup = SentencePieceTokenizer::load(trained().model_path, {{"[S0]", 1}, {"[S0]", 2}});
  EXPECT_FALSE(dup.ok());
  auto negative = SentencePieceTokenizer::load(trained().model_path, {{"[S0]", -1}});
  EXPECT_FALSE(negative.ok());
  EXPECT_FALSE(train_sentencepiece({}, {}).ok());
  SentencePieceTrainOptions bad;
  bad.model_type = "word2vec";
  EXPECT_FALSE(train_sentencepiece(corpus(), bad).ok());
}

}  // namespace
}  // namespace chorus::text
