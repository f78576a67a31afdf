#include "text/byte_level.h"

#include <utf8proc.h>

namespace chorus::text {
namespace {

bool is_self_mapped(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::int16_t, 512> to_byte{};  // every alphabet character is below U+0200

  Tables() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      to_char[b] = is_self_mapped(b) ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<std::int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_level_char(std::uint8_t b) { return tables().to_char[b]; }

std::optional<std::uint8_t> byte_level_byte(char32_t c) {
  if (c >= tables().to_byte.size() || tables().to_byte[c] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(tables().to_byte[c]);
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) {
    utf8proc_uint8_t buf[4];
    const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(byte_level_char(b)), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
  }
  return out;
}

std::optional<std::string> from_byte_level(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  const auto* s = reinterpret_cast<const utf8proc_uint8_t*>(token.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(token.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(s, left, &c);
    if (n <= 0) return std::nullopt;
    const auto b = byte_level_byte(static_cast<char32_t>(c));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    s += n;
    left -= n;
  }
  return out;
}

}  // namespace chorus::text
