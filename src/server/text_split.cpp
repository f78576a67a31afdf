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

// Where split_text() cuts `rest` (trimmed, non-empty): the byte offset after its first segment.
size_t first_cut(std::string_view rest, size_t max_chars) {
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
  if (i < rest.size())
    for (int s = 3; s >= 1; --s)
      if (best[s] > 0) return best[s];
  return i;  // all of it fits, or a hard cut at a character boundary
}

// The byte offset after the first sentence end of `s` that is known to be one: its mark is
// followed by a space (or needs none); with `at_end` a mark that ends `s` counts too. 0: none.
size_t sentence_end(std::string_view s, bool at_end) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = char_len(s, i);
    if (boundary_strength(s, i, len) == 3 && (at_end || i + len < s.size() || len > 1 || s[i] == '\n')) return i + len;
    i += len;
  }
  return 0;
}

}  // namespace

std::vector<std::string> split_text(std::string_view text, size_t max_chars) {
  if (max_chars < 1) max_chars = 1;
  std::vector<std::string> out;
  std::string_view rest = trim(text);
  while (!rest.empty()) {
    const size_t cut = first_cut(rest, max_chars);
    const std::string_view seg = trim(rest.substr(0, cut));
    if (!seg.empty()) out.emplace_back(seg);
    rest = trim(rest.substr(cut));
  }
  return out;
}

std::vector<std::string> take_segments(std::string& pending, size_t max_chars, bool done) {
  if (max_chars < 1) max_chars = 1;
  std::vector<std::string> out;
  size_t b = 0;
  while (b < pending.size() && is_space(pending, b)) ++b;
  for (;;) {
    const std::string_view rest = std::string_view(pending).substr(b);
    if (rest.empty()) break;
    if (const size_t end = sentence_end(rest, done); end > 0) {
      for (auto& seg : split_text(rest.substr(0, end), max_chars)) out.push_back(std::move(seg));
      b += end;
    } else if (done) {
      for (auto& seg : split_text(rest, max_chars)) out.push_back(std::move(seg));
      b = pending.size();
    } else {
      // A long run without a sentence end: its first segment is settled once more than max_chars
      // characters have arrived (the cut looks one character ahead).
      size_t chars = 0;
      for (size_t i = 0; i < rest.size() && chars <= max_chars; i += char_len(rest, i)) ++chars;
      if (chars <= max_chars) break;
      const size_t cut = first_cut(rest, max_chars);
      const std::string_view seg = trim(rest.substr(0, cut));
      if (!seg.empty()) out.emplace_back(seg);
      b += cut;
    }
    while (b < pending.size() && is_space(pending, b)) ++b;
  }
  pending.erase(0, b);
  return out;
}

std::vector<std::string> split_sentences(std::string_view text, size_t max_chars) {
  std::string all(text);
  return take_segments(all, max_chars, true);
}

}  // namespace chorus::server
