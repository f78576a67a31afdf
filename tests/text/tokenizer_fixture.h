// Shared set-up for the tokenizer tests: the reference Qwen2 files laid out as the Qwen3-TTS
// checkpoints ship them (see shared/reference/qwen2_tokenizer/README.md), and the golden lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/qwen2_tokenizer.h"

namespace chorus::test {

struct GoldenLine {
  std::string text;
  std::vector<std::int32_t> ids;
  std::string decoded;
  std::string category;
};

// golden.jsonl, parsed.
const std::vector<GoldenLine>& golden_lines();

// golden_fix_mistral_regex.jsonl: the same strings with transformers' fix_mistral_regex split regex.
const std::vector<GoldenLine>& mistral_fix_golden_lines();

// A folder with vocab.json, merges.txt and a tokenizer_config.json that carries the Qwen2.5 added
// tokens plus the ten assumed Qwen3-TTS ones (151665-151674), as golden.jsonl was made with.
const std::string& qwen3_tts_tokenizer_folder();

// A folder with only a tokenizer.json, built from the same files in the layout the README gives.
const std::string& tokenizer_json_folder();

// The same with the fix_mistral_regex split regex (see the reference README's "Regex caveat").
const std::string& mistral_fix_tokenizer_json_folder();

// The tokenizer loaded from qwen3_tts_tokenizer_folder(), loaded once; nullptr (and a test failure)
// if it does not load.
const text::Qwen2Tokenizer* qwen3_tts_tokenizer();

}  // namespace chorus::test
