#include "text/normalize.h"

#include <utf8proc.h>

#include <cstdlib>

namespace chorus::text {

bool is_certainly_nfc(std::string_view text) {
  // Every code point below U+0300 is NFC and never combines with its neighbours. Such code points
  // are encoded with bytes below 0xCC only (lead bytes of U+0300 and above start at 0xCC).
  for (unsigned char c : text) {
    if (c >= 0xCC) return false;
  }
  return true;
}

bool nfc(std::string_view text, std::string* out) {
  if (text.empty()) {
    out->clear();
    return true;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    out->assign(text);
    return false;
  }
  out->assign(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(n));
  std::free(mapped);
  return true;
}

}  // namespace chorus::text
