#include "text/utf8.h"

#include <cstdint>
#include <cstring>

namespace chorus::text {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Examines the sequence at s[0..n). Returns its length when it is one well-formed character;
// otherwise returns 0 and sets *bad to the length of the maximal ill-formed subpart (>= 1).
std::size_t scan_char(const unsigned char* s, std::size_t n, std::size_t* bad) {
  const unsigned char lead = s[0];
  if (lead < 0x80) return 1;
  std::size_t need;                  // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;       // overlong
    if (lead == 0xED) hi = 0x9F;       // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;       // overlong
    if (lead == 0xF4) hi = 0x8F;       // above U+10FFFF
  } else {
    *bad = 1;
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    const bool in_range = k < n && (k == 1 ? (s[k] >= lo && s[k] <= hi) : (s[k] >= 0x80 && s[k] <= 0xBF));
    if (!in_range) {
      *bad = k;
      return 0;
    }
  }
  return need + 1;
}

// Length of the longest all-ASCII prefix, eight bytes at a time.
std::size_t ascii_prefix(const unsigned char* s, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < n && s[i] < 0x80) ++i;
  return i;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    i += ascii_prefix(s + i, n - i);
    if (i >= n) break;
    std::size_t bad = 0;
    const std::size_t len = scan_char(s + i, n - i, &bad);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::string out;
  out.reserve(n);
  std::size_t i = 0;
  while (i < n) {
    const std::size_t ascii = ascii_prefix(s + i, n - i);
    out.append(text.data() + i, ascii);
    i += ascii;
    if (i >= n) break;
    std::size_t bad = 0;
    const std::size_t len = scan_char(s + i, n - i, &bad);
    if (len > 0) {
      out.append(text.data() + i, len);
      i += len;
    } else {
      out.append(kReplacement, 3);
      i += bad;
    }
  }
  return out;
}

std::size_t utf8_char_length(std::string_view text) {
  if (text.empty()) return 1;
  std::size_t bad = 0;
  const std::size_t len = scan_char(reinterpret_cast<const unsigned char*>(text.data()), text.size(), &bad);
  return len > 0 ? len : 1;
}

}  // namespace chorus::text
