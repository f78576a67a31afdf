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

// Text that is still being written, spoken sentence by sentence: removes from the front of
// `pending` the segments that are complete (a sentence whose end mark has been followed by a space,
// or a run of more than `max_chars` without one, cut as split_text() cuts it) and returns them;
// with `done` the rest too. Each sentence is its own segment, so the segments do not depend on how
// the text arrived: fed in any pieces, they equal split_sentences() of the whole text.
std::vector<std::string> take_segments(std::string& pending, size_t max_chars, bool done);
// The whole text cut at every sentence end, each sentence split as split_text() splits it.
std::vector<std::string> split_sentences(std::string_view text, size_t max_chars);

}  // namespace chorus::server
