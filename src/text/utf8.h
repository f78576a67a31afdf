// UTF-8 validity and repair. The tokenizer promises a total function from bytes to ids, so bytes that
// are not well-formed UTF-8 are replaced before anything else sees them (docs/tokenizer.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace chorus::text {

// True when `s` is well-formed UTF-8 as defined by the Unicode Standard, table 3-7 (no overlong
// forms, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Replaces every maximal ill-formed subpart of `s` with one U+FFFD ("substitution of maximal
// subparts", Unicode §3.9; what Python's errors="replace" and Rust's from_utf8_lossy do). Valid
// input comes back unchanged.
std::string to_valid_utf8(std::string_view s);

// Byte length of the well-formed UTF-8 character that starts `s` (1 for an empty or ill-formed
// start, so that callers always advance).
std::size_t utf8_char_length(std::string_view s);

}  // namespace chorus::text
