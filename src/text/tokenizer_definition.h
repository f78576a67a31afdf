// What a byte-level BPE tokenizer is made of, read from the files a checkpoint ships, before any
// validation against the vocabulary (that is BpeModel's job). Two sources:
//   - tokenizer.json (Hugging Face "fast" tokenizer), when a folder has one;
//   - vocab.json + merges.txt + tokenizer_config.json (what Qwen3-TTS checkpoints ship), which get
//     the Qwen2 pipeline: NFC, the Qwen2 split regex, byte-level BPE.
// Every reader caps what it accepts (file sizes, counts, lengths, JSON depth) so a hostile file
// gives an error, not a crash or an unbounded allocation (RELIABILITY.md §1.5).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace chorus::text {

// The pre-tokenizer regex of Qwen2 (and the one golden.jsonl was made with).
extern const char kQwen2SplitRegex[];

struct AddedTokenSpec {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched after NFC instead of in the raw text
};

struct TokenizerDefinition {
  std::vector<std::pair<std::string, std::int32_t>> vocab;    // byte-level token string -> id
  std::vector<std::pair<std::string, std::string>> merges;    // in rank order
  std::vector<AddedTokenSpec> added_tokens;
  std::string split_regex = kQwen2SplitRegex;
  bool nfc = true;
  bool ignore_merges = false;  // a piece that is itself a vocab entry skips the merges
};

// Limits on what the readers accept.
inline constexpr std::int32_t kMaxTokenId = (1 << 21) - 1;
inline constexpr std::size_t kMaxTokenBytes = 1024;
inline constexpr std::size_t kMaxAddedTokens = 1 << 16;
inline constexpr std::size_t kMaxRegexBytes = 4096;
inline constexpr std::size_t kMaxJsonDepth = 64;

// Parses the contents of a tokenizer.json.
Result<TokenizerDefinition> parse_tokenizer_json(std::string_view json_text);

// Parses the contents of vocab.json, merges.txt and tokenizer_config.json.
Result<TokenizerDefinition> parse_vocab_and_merges(std::string_view vocab_json, std::string_view merges_txt,
                                                   std::string_view tokenizer_config_json);

// Reads the definition from a folder: tokenizer.json if present, else the three files.
Result<TokenizerDefinition> read_tokenizer_folder(const std::string& dir);

}  // namespace chorus::text
