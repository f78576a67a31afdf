// Tokenizing text that arrives in pieces (an LLM's output, token by token), exactly: the ids handed
// out, concatenated, are always a prefix of Qwen2Tokenizer::encode(all text so far + whatever may
// follow), and after finish() they equal encode(all text). A delta may split the text anywhere,
// even inside a multi-byte character.
//
//   text::IncrementalTokenizer inc(tok);
//   std::vector<int32_t> ids;
//   inc.append("Hello, wor", &ids);   // ids: "Hello" ","   (" wor" may still become " world")
//   inc.append("ld!", &ids);          // ids: + " world"
//   inc.finish(&ids);                 // ids: + "!"
//
// The text is cut only where no later text can change the tokens before the cut, and those tokens
// are released; the tail after the last such cut waits. A cut sits right before a character C that
//   * is an ASCII space following a letter, number, punctuation or symbol, or
//   * is punctuation or a symbol (not an apostrophe) following a letter or number,
// and that NFC leaves alone (class 0, never the second half of a composition), where no added
// token could straddle it. With the Qwen2 split regex, which has no look-behind, every regex match
// before such a cut ends at or before it having looked at no character past C, NFC never combines
// across it, and ill-formed UTF-8 is repaired on either side alike, so tokenizing the two sides
// separately gives the tokens of the whole. With any other split regex nothing is released before
// finish() (still exact, only later).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/qwen2_tokenizer.h"

namespace chorus::text {

class IncrementalTokenizer {
 public:
  explicit IncrementalTokenizer(Qwen2Tokenizer tokenizer);

  // Adds `delta` and appends to *ids the ids that no later text can change.
  void append(std::string_view delta, std::vector<std::int32_t>* ids);
  // The text is complete: appends the rest of the ids.
  void finish(std::vector<std::int32_t>* ids);

  std::size_t pending_bytes() const { return pending_.size(); }  // text whose ids are held back
  bool finished() const { return finished_; }

  // The byte offset of the last safe cut in `text` (0: none), by the rules above.
  std::size_t last_cut(std::string_view text) const;

 private:
  bool straddles_added_token(std::string_view before) const;

  Qwen2Tokenizer tokenizer_;
  bool cuts_allowed_ = false;  // the split regex is Qwen2's
  std::string pending_;
  bool finished_ = false;
};

}  // namespace chorus::text
