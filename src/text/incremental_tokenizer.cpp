#include "text/incremental_tokenizer.h"

#include <utf8proc.h>

#include "text/tokenizer_definition.h"

namespace chorus::text {

namespace {

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The code point that starts at `at`, or -1 when it is ill-formed or incomplete.
utf8proc_int32_t char_at(std::string_view s, std::size_t at) {
  utf8proc_int32_t c = -1;
  const auto len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + at),
                                    static_cast<utf8proc_ssize_t>(s.size() - at), &c);
  return len > 0 ? c : -1;
}

// The code point that ends right before `end`, or -1 when those bytes are not one well-formed one.
utf8proc_int32_t char_before(std::string_view s, std::size_t end) {
  std::size_t start = end;
  for (int k = 0; k < 4 && start > 0; ++k) {
    --start;
    if (!is_continuation(static_cast<unsigned char>(s[start]))) break;
  }
  if (start == end) return -1;
  utf8proc_int32_t c = -1;
  const auto len = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + start),
                                    static_cast<utf8proc_ssize_t>(end - start), &c);
  return len == static_cast<utf8proc_ssize_t>(end - start) ? c : -1;
}

enum class Kind { kLetterOrNumber, kPunctOrSymbol, kOther };

Kind kind(utf8proc_int32_t c) {
  if (c < 0) return Kind::kOther;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return Kind::kLetterOrNumber;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK: case UTF8PROC_CATEGORY_SO:
      return Kind::kPunctOrSymbol;
    default:
      return Kind::kOther;  // marks, spaces, controls, format characters, unassigned
  }
}

// Class 0, no canonical decomposition, and never the second half of a canonical composition: NFC
// leaves it and everything around it as they are.
bool nfc_inert(utf8proc_int32_t c) {
  if (c >= 0x1100 && c <= 0x11FF) return false;  // conjoining jamo compose algorithmically
  const utf8proc_property_t* p = utf8proc_get_property(c);
  if (p->combining_class != 0) return false;
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
  return true;
}

}  // namespace

IncrementalTokenizer::IncrementalTokenizer(Qwen2Tokenizer tokenizer)
    : tokenizer_(std::move(tokenizer)), cuts_allowed_(tokenizer_.split_pattern() == kQwen2SplitRegex) {}

bool IncrementalTokenizer::straddles_added_token(std::string_view before) const {
  for (const std::string& t : tokenizer_.added_token_texts())
    for (std::size_t j = 1; j < t.size() && j <= before.size(); ++j)
      if (before.substr(before.size() - j) == std::string_view(t).substr(0, j)) return true;
  return false;
}

std::size_t IncrementalTokenizer::last_cut(std::string_view text) const {
  if (!cuts_allowed_) return 0;
  for (std::size_t c = text.size(); c-- > 1;) {
    const auto b = static_cast<unsigned char>(text[c]);
    if (is_continuation(b)) continue;
    const utf8proc_int32_t next = char_at(text, c);
    if (next < 0 || next == '\'') continue;
    const bool space = next == ' ';
    if (!space && (kind(next) != Kind::kPunctOrSymbol || !nfc_inert(next))) continue;
    const Kind prev = kind(char_before(text, c));
    if (space ? prev == Kind::kOther : prev != Kind::kLetterOrNumber) continue;
    if (straddles_added_token(text.substr(0, c))) continue;
    return c;
  }
  return 0;
}

void IncrementalTokenizer::append(std::string_view delta, std::vector<std::int32_t>* ids) {
  if (finished_) return;
  pending_.append(delta.data(), delta.size());
  const std::size_t cut = last_cut(pending_);
  if (cut == 0) return;
  tokenizer_.encode(std::string_view(pending_).substr(0, cut), ids);
  pending_.erase(0, cut);
}

void IncrementalTokenizer::finish(std::vector<std::int32_t>* ids) {
  if (finished_) return;
  finished_ = true;
  if (!pending_.empty()) tokenizer_.encode(pending_, ids);
  pending_.clear();
}

}  // namespace chorus::text
