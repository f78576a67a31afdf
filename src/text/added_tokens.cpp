#include "text/added_tokens.h"

#include <algorithm>
#include <cstring>

namespace chorus::text {

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::pair<std::string, std::int32_t>> tokens) : tokens_(std::move(tokens)) {
  std::erase_if(tokens_, [](const auto& t) { return t.first.empty(); });
  std::sort(tokens_.begin(), tokens_.end(), [](const auto& a, const auto& b) {
    const auto fa = static_cast<unsigned char>(a.first[0]), fb = static_cast<unsigned char>(b.first[0]);
    if (fa != fb) return fa < fb;
    if (a.first.size() != b.first.size()) return a.first.size() > b.first.size();
    return a.first < b.first;
  });
  std::size_t i = 0;
  for (int b = 0; b < 256; ++b) {
    first_byte_start_[b] = static_cast<std::uint32_t>(i);
    while (i < tokens_.size() && static_cast<unsigned char>(tokens_[i].first[0]) == b) ++i;
  }
  first_byte_start_[256] = static_cast<std::uint32_t>(i);
  if (!tokens_.empty() && tokens_.front().first[0] == tokens_.back().first[0])
    single_first_byte_ = static_cast<unsigned char>(tokens_.front().first[0]);
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::find(std::string_view text, std::size_t from) const {
  if (tokens_.empty()) return std::nullopt;
  const std::size_t n = text.size();
  for (std::size_t pos = from; pos < n; ++pos) {
    if (single_first_byte_ >= 0) {  // the common case (every Qwen token starts with '<'): memchr
      const void* hit = std::memchr(text.data() + pos, single_first_byte_, n - pos);
      if (hit == nullptr) return std::nullopt;
      pos = static_cast<std::size_t>(static_cast<const char*>(hit) - text.data());
    }
    const auto b = static_cast<unsigned char>(text[pos]);
    for (std::uint32_t k = first_byte_start_[b]; k < first_byte_start_[b + 1]; ++k) {
      const std::string& token = tokens_[k].first;
      if (text.compare(pos, token.size(), token) == 0) return Match{pos, pos + token.size(), tokens_[k].second};
    }
  }
  return std::nullopt;
}

}  // namespace chorus::text
