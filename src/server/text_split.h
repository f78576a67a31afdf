// Long input split into segments a model speaks well in one go: at sentence ends first, then at
// clause marks, then at spaces, and only as a last resort inside a word (never inside a UTF-8
// character). Segments are spoken in order as one continuous stream; joined, they give back the
// input except for the whitespace at the cuts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chorus::server {

// `max_chars` in code points (>= 1). Empty or all-space input gives no segments.
std::vector<std::string> split_text(std::string_view text, size_t max_chars);

}  // namespace chorus::server
