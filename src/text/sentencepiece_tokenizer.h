// A thin wrapper over libsentencepiece (Debian's) for SentencePiece tokenizers such as Gemma 3's,
// which Breeze TTS 2's text encoder uses.
//
//   auto tok = chorus::text::SentencePieceTokenizer::load("tokenizer.model", {{"<ins_bos>", 262156}});
//   std::vector<int32_t> ids = tok->encode("[S0]<ins_bos>warm<ins_eos>Hello");
//
// Added tokens (ids outside or on top of the SentencePiece model: speaker tags, instruction markers)
// are matched in the raw text first, leftmost and then longest, as Hugging Face does; the text
// between them goes through SentencePiece. No BOS/EOS is added: prompt builders add those where the
// templates want them. Invalid UTF-8 is repaired (each maximal ill-formed subpart -> U+FFFD) first.
//
// Loading and training are the steps that can fail. A loaded tokenizer is immutable; copies share
// the processor and may be used from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace chorus::text {

using AddedTokens = std::vector<std::pair<std::string, std::int32_t>>;

class SentencePieceTokenizer {
 public:
  // A model file (tokenizer.model). Added token ids must be non-negative.
  static Result<SentencePieceTokenizer> load(const std::string& model_path, AddedTokens added = {});
  // A serialized ModelProto in memory (`label` names it in errors).
  static Result<SentencePieceTokenizer> from_serialized(std::string_view proto, const std::string& label,
                                                        AddedTokens added = {});

  std::vector<std::int32_t> encode(std::string_view text) const;
  // The pieces SentencePiece produced for `text` (added tokens appear as their own text).
  std::vector<std::string> encode_pieces(std::string_view text) const;
  // Text of the ids: added tokens as their strings, pieces through SentencePiece; ids that name
  // nothing are skipped.
  std::string decode(std::span<const std::int32_t> ids) const;

  // Number of pieces in the SentencePiece model (added tokens not counted).
  std::int32_t piece_count() const;
  // Id of a piece as the model spells it ("▁the", "<0x41>"), or of an added token.
  std::optional<std::int32_t> token_id(std::string_view token) const;

 private:
  SentencePieceTokenizer() = default;  // only the factories make one (impl_ is never null)
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Training a small model with libsentencepiece's trainer (tests and make-tiny). Defaults follow
// Gemma's setup: BPE, byte fallback, digits split, no dummy prefix, no normalisation.
struct SentencePieceTrainOptions {
  int vocab_size = 400;
  std::string model_type = "bpe";  // bpe or unigram
  bool byte_fallback = true;
  // <pad>/<eos>/<bos>/<unk> at Gemma's ids.
  int pad_id = 0, eos_id = 1, bos_id = 2, unk_id = 3;
  // Pieces forced into the vocabulary, right after the control ids.
  std::vector<std::string> user_defined_symbols;
  // When false the vocabulary may end up smaller than vocab_size (small corpora).
  bool hard_vocab_limit = false;
};
// Returns the serialized ModelProto (what a tokenizer.model file holds).
Result<std::string> train_sentencepiece(const std::vector<std::string>& sentences, const SentencePieceTrainOptions& options);

}  // namespace chorus::text
