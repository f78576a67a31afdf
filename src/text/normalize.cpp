#include "text/normalize.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>

namespace chorus::text {

namespace {

// A code point that leaves any text it is in unchanged by NFC: it has no canonical decomposition,
// combining class 0, and is never the second half of a canonical composition (utf8proc marks those
// with comb_index >= 0x8000). Conjoining Hangul jamo compose algorithmically, so they never count.
bool is_nfc_inert(utf8proc_int32_t c) {
  if (c >= 0x1100 && c <= 0x11FF) return false;
  const utf8proc_property_t* p = utf8proc_get_property(c);
  if (p->combining_class != 0) return false;
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;  // canonical decomposition
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
  return true;
}

}  // namespace

bool is_certainly_nfc(std::string_view text) {
  const auto* s = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto n = static_cast<utf8proc_ssize_t>(text.size());
  utf8proc_ssize_t i = 0;
  while (i < n) {
    // Code points below U+0300 are inert; their bytes are all below 0xCC.
    if (s[i] < 0xCC) {
      ++i;
      continue;
    }
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(s + i, n - i, &c);
    if (len <= 0 || !is_nfc_inert(c)) return false;
    i += len;
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
