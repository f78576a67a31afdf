// The Qwen2 byte-level BPE text tokenizer that Qwen3-TTS uses, exact to Hugging Face tokenizers.
//
//   auto tok = chorus::text::Qwen2Tokenizer::load("/models/Qwen3-TTS-12Hz-0.6B-Base");
//   std::vector<int32_t> ids = tok->encode("<|im_start|>assistant\nHello<|im_end|>\n");
//   std::string text = tok->decode(ids);
//
// encode: invalid UTF-8 is repaired (each maximal ill-formed subpart -> U+FFFD); added tokens are
// matched in the raw text; the rest is NFC-normalised, split by the Qwen2 regex, mapped to
// byte-level symbols and merged by BPE rank. No BOS/EOS is added (Qwen2 has none).
// decode: the bytes of each id, with ill-formed UTF-8 replaced as above; ids that name no token are
// skipped. docs/tokenizer.md has the details.
//
// Loading is the only step that can fail. A loaded tokenizer is immutable apart from an internal,
// bounded, thread-safe cache: share it between threads freely; copies are cheap and share state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "text/tokenizer_definition.h"

namespace chorus::text {

class Qwen2Tokenizer {
 public:
  // `dir` is a model folder or a tokenizer folder: tokenizer.json when it has one, otherwise
  // vocab.json + merges.txt + tokenizer_config.json.
  static Result<Qwen2Tokenizer> load(const std::string& dir);
  static Result<Qwen2Tokenizer> from_definition(const TokenizerDefinition& def);

  std::vector<std::int32_t> encode(std::string_view text) const;
  // Appends to *ids instead (reuses its capacity).
  void encode(std::string_view text, std::vector<std::int32_t>* ids) const;

  std::string decode(std::span<const std::int32_t> ids) const;

  // Id of a token as the files spell it: "<|im_start|>", "assistant", "Ġworld".
  std::optional<std::int32_t> token_id(std::string_view token) const;

  // One past the largest token id.
  std::int32_t id_limit() const;

  // The pre-tokenizer's split regex and the added tokens' texts (for incremental_tokenizer.h,
  // whose safe cut points depend on both).
  const std::string& split_pattern() const;
  const std::vector<std::string>& added_token_texts() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace chorus::text
