// The pre-tokenizer's split regex, compiled with Oniguruma: the engine Hugging Face tokenizers uses,
// with the same syntax (Ruby) and Unicode tables, so \p{L}, \s and (?i:...) mean the same thing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "text/utf8.h"

namespace chorus::text {

class SplitRegex {
 public:
  static Result<SplitRegex> compile(const std::string& pattern);

  // Splits `text` the way a Hugging Face Split pre-tokenizer with behaviour "Isolated" does: every
  // match is a piece and so is every stretch of text between matches. Calls on_piece(begin, end)
  // with byte offsets, in order; pieces are never empty. Thread-safe.
  template <class OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const;

 private:
  enum class Found { kMatch, kNone, kGaveUp };
  // Leftmost match at or after `from`. kGaveUp when Oniguruma hit a backtracking limit there.
  Found search(std::string_view text, std::size_t from, std::size_t* begin, std::size_t* end) const;

  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};


template <class OnPiece>
void SplitRegex::split(std::string_view text, OnPiece&& on_piece) const {
  // Iteration as in the onig crate's find_iter: an empty match right after the previous match is
  // skipped by one character; other empty matches still separate the text around them.
  const std::size_t n = text.size();
  std::size_t from = 0, prev = 0;
  std::size_t last_match_end = static_cast<std::size_t>(-1);
  while (from <= n) {
    std::size_t begin = 0, end = 0;
    const Found found = search(text, from, &begin, &end);
    if (found == Found::kNone) break;
    if (found == Found::kGaveUp || (begin == end && end == last_match_end)) {
      // A character the regex gave up on stays in the text between matches.
      from += from < n ? utf8_char_length(text.substr(from)) : 1;
      continue;
    }
    from = last_match_end = end;
    if (begin > prev) on_piece(prev, begin);
    if (end > begin) on_piece(begin, end);
    prev = end;
  }
  if (prev < n) on_piece(prev, n);
}

}  // namespace chorus::text
