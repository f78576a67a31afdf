// Unicode NFC through utf8proc, the normaliser the Qwen2 tokenizer applies to the text between
// added tokens.
#pragma once

#include <string>
#include <string_view>

namespace chorus::text {

// Writes NFC(text) to *out. `text` must be well-formed UTF-8 (see utf8.h). Returns false only when
// utf8proc fails (out of memory); *out then holds `text` unchanged.
bool nfc(std::string_view text, std::string* out);

// True when `text` is certainly already in NFC, so nfc() may be skipped. Conservative: false means
// "maybe not".
bool is_certainly_nfc(std::string_view text);

}  // namespace chorus::text
