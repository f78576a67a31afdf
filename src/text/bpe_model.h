// A validated byte-level BPE model: every merge's parts and result are in the vocabulary, ids are
// unique and bounded, and each id knows the bytes it decodes to. Merging follows the Hugging Face
// BPE exactly: repeatedly apply the pair with the lowest merge rank, leftmost first.
// Immutable after build(), so one model serves any number of threads.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "text/tokenizer_definition.h"

namespace chorus::text {

class BpeModel {
 public:
  static Result<BpeModel> build(const TokenizerDefinition& def);

  // Appends the ids of one pre-tokenized piece, given as raw bytes.
  void encode_piece(std::string_view bytes, std::vector<std::int32_t>* ids) const;

  // Id of a token as written in the files (byte-level form for vocab entries, e.g. "Ġworld"; the
  // content for added tokens, which take precedence).
  std::optional<std::int32_t> token_id(std::string_view token) const;

  // Bytes that `id` decodes to; empty for an id that names no token.
  std::string_view decoded_bytes(std::int32_t id) const;

  // One past the largest id.
  std::int32_t id_limit() const { return static_cast<std::int32_t>(decode_offsets_.size()) - 1; }

 private:
  struct MergeSlot {
    std::uint64_t key;  // (left << 32) | right; kEmptyKey when free
    std::uint32_t rank;
    std::int32_t result;
  };
  static constexpr std::uint64_t kEmptyKey = ~0ull;

  const MergeSlot* find_merge(std::int32_t left, std::int32_t right) const;
  void insert_merge(std::int32_t left, std::int32_t right, std::uint32_t rank, std::int32_t result);
  void merge_symbols(std::string_view bytes, std::vector<std::int32_t>* ids) const;
  void merge_short(std::string_view bytes, std::vector<std::int32_t>* ids) const;

  std::vector<MergeSlot> merge_slots_;  // open addressing, power-of-two size, at most half full
  std::uint64_t merge_mask_ = 0;
  std::array<std::int32_t, 256> byte_ids_{};  // id of each single-byte token, -1 if none
  std::unordered_map<std::string, std::int32_t> token_ids_;
  std::unordered_map<std::string, std::int32_t> whole_piece_ids_;  // raw bytes -> id, with ignore_merges
  bool ignore_merges_ = false;
  // No two merges make the same token. Then "lowest rank, leftmost first" needs no stale-entry
  // bookkeeping and short pieces take a simpler path with the same result.
  bool merge_results_unique_ = false;
  std::string decode_blob_;                   // decoded bytes of all ids, back to back
  std::vector<std::uint32_t> decode_offsets_;  // id -> start in decode_blob_; id_limit()+1 entries
};

}  // namespace chorus::text
