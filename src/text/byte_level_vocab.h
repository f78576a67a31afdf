// Writes a small but valid byte-level BPE tokenizer (vocab.json, merges.txt, tokenizer_config.json)
// for random-weight demo and test checkpoints: the 256 byte symbols, merges that make each listed
// word a single token, and special tokens at fixed ids.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace chorus::text {

struct ByteLevelVocabSpec {
  std::vector<std::string> words;                             // ASCII words to merge into one token
  std::vector<std::pair<int64_t, std::string>> special_tokens;  // id -> content
};

Status write_byte_level_vocab(const std::string& dir, const ByteLevelVocabSpec& spec);

}  // namespace chorus::text
