// The byte-level alphabet of GPT-2-style BPE: each of the 256 byte values is written as one
// printable Unicode character, so that vocab.json and merges.txt can hold arbitrary bytes as text.
// Printable Latin-1 bytes stand for themselves; the other 68 take U+0100.. in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chorus::text {

// The character that stands for byte b.
char32_t byte_level_char(std::uint8_t b);

// The byte a character stands for, if it is in the alphabet.
std::optional<std::uint8_t> byte_level_byte(char32_t c);

// UTF-8 text of the byte-level characters for `bytes` (e.g. " world" -> "Ġworld").
std::string to_byte_level(std::string_view bytes);

// The bytes a byte-level token stands for, or nullopt when the token is not well-formed UTF-8 or
// has a character outside the alphabet.
std::optional<std::string> from_byte_level(std::string_view token);

}  // namespace chorus::text
