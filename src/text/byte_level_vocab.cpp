#include "text/byte_level_vocab.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

namespace chorus::text {

namespace {

// The GPT-2 byte-to-symbol table: printable Latin-1 bytes stand for themselves, the rest are
// shifted to code points from 256 up, so every byte has a visible symbol.
std::string byte_symbol(int b) {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!printable(x)) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

Status write_byte_level_vocab(const std::string& dir, const ByteLevelVocabSpec& spec) {
  namespace fs = std::filesystem;
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(b)] = b;
  std::vector<std::string> merges;
  int64_t next = 256;
  for (const auto& w : spec.words) {
    std::string acc = byte_symbol(static_cast<unsigned char>(w[0]));
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string sym = byte_symbol(static_cast<unsigned char>(w[i]));
      merges.push_back(acc + " " + sym);
      acc += sym;
      if (!vocab.contains(acc)) vocab[acc] = next++;
    }
  }
  for (const auto& [id, content] : spec.special_tokens)
    if (id < next)
      return make_error(ErrorCode::kInvalidArgument, "special token " + content + " id " + std::to_string(id) +
                                                         " collides with the byte-level vocabulary");
  {
    std::ofstream out(fs::path(dir) / "vocab.json");
    out << vocab.dump() << "\n";
    if (!out) return make_error(ErrorCode::kIo, dir + "/vocab.json: write failed");
  }
  {
    std::ofstream out(fs::path(dir) / "merges.txt");
    out << "#version: 0.2\n";
    for (const auto& m : merges) out << m << "\n";
    if (!out) return make_error(ErrorCode::kIo, dir + "/merges.txt: write failed");
  }
  nlohmann::ordered_json added = nlohmann::ordered_json::object();
  for (const auto& [id, content] : spec.special_tokens)
    added[std::to_string(id)] = {{"content", content}, {"lstrip", false}, {"normalized", false},
                                 {"rstrip", false},    {"single_word", false}, {"special", true}};
  nlohmann::ordered_json cfg = {{"add_bos_token", false},       {"add_prefix_space", false},
                                {"added_tokens_decoder", added}, {"bos_token", nullptr},
                                {"clean_up_tokenization_spaces", false}, {"errors", "replace"},
                                {"model_max_length", 131072},   {"split_special_tokens", false},
                                {"tokenizer_class", "Qwen2Tokenizer"}, {"unk_token", nullptr}};
  std::ofstream out(fs::path(dir) / "tokenizer_config.json");
  out << cfg.dump(2) << "\n";
  return out ? ok_status() : make_error(ErrorCode::kIo, dir + "/tokenizer_config.json: write failed");
}

}  // namespace chorus::text
