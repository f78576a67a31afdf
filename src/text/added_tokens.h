// Finds added tokens (<|im_start|>, <tts_pad>, ...) in text. Hugging Face splits the text on them
// before anything else, taking at each point the leftmost match and, among the tokens that start
// there, the longest.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::text {

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<std::pair<std::string, std::int32_t>> tokens);

  struct Match {
    std::size_t begin = 0, end = 0;
    std::int32_t id = 0;
  };

  // The leftmost-longest match starting at or after `from`.
  std::optional<Match> find(std::string_view text, std::size_t from) const;

  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<std::pair<std::string, std::int32_t>> tokens_;  // grouped by first byte, longest first
  std::array<std::uint32_t, 257> first_byte_start_{};          // tokens_[start[b], start[b+1]) begin with b
  int single_first_byte_ = -1;                                 // the only first byte, when there is one
};

}  // namespace chorus::text
