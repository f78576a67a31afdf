#include "server/text_split.h"

#include <algorithm>

namespace chorus::server {

namespace {

bool is_space(std::string_view s, size_t i) { return s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'; }

// Length in bytes of the UTF-8 character starting at s[i] (1 for a stray byte).
size_t char_len(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  return std::min(n, s.size() - i);
}

// Whether a cut of the given strength may follow the character at byte i: 3 sentence end, 2 clause
// mark, 1 space.
int boundary_strength(std::string_view s, size_t i, size_t len) {
  const std::string_view ch = s.substr(i, len);
  static const std::string_view kSentence[] = {".", "!", "?", "\xE3\x80\x82", "\xEF\xBC\x81", "\xEF\xBC\x9F", "\n"};
  static const std::string_view kClause[] = {",", ";", ":", "\xEF\xBC\x8C", "\xE3\x80\x81", "\xEF\xBC\x9B", "\xEF\xBC\x9A",
                                             "\xE2\x80\x94"};
  const bool next_is_space_or_end = i + len >= s.size() || is_space(s, i + len);
  for (auto m : kSentence)
    if (ch == m) return (m.size() > 1 || m == "\n" || next_is_space_or_end) ? 3 : 0;
  for (auto m : kClause)
    if (ch == m) return (m.size() > 1 || next_is_space_or_end) ? 2 : 0;
  if (is_space(s, i)) return 1;
  return 0;
}

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s, b)) ++b;
  while (e > b && is_space(s, e - 1)) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::vector<std::string> split_text(std::string_view text, size_t max_chars) {
  if (max_chars < 1) max_chars = 1;
  std::vector<std::string> out;
  std::string_view rest = trim(text);
  while (!rest.empty()) {
    // Walk up to max_chars characters, remembering the last cut of each strength.
    size_t i = 0, chars = 0;
    size_t best[4] = {0, 0, 0, 0};  // byte offset just after the boundary, per strength
    while (i < rest.size() && chars < max_chars) {
      const size_t len = char_len(rest, i);
      const int s = boundary_strength(rest, i, len);
      i += len;
      ++chars;
      if (s > 0) best[s] = i;
    }
    size_t cut = i;  // all of it fits, or a hard cut at a character boundary
    if (i < rest.size()) {
      for (int s = 3; s >= 1; --s)
        if (best[s] > 0) {
          cut = best[s];
          break;
        }
    }
    const std::string_view seg = trim(rest.substr(0, cut));
    if (!seg.empty()) out.emplace_back(seg);
    rest = trim(rest.substr(cut));
  }
  return out;
}

}  // namespace chorus::server
