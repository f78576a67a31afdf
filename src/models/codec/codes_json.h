// Codec frames as JSON, the format `chorus say --codes-out` writes and `chorus decode` reads:
//   {"codes": [[c0, c1, ..., c15], ...]}   one row of num_quantizers codes per frame.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace chorus::codec {

struct CodeFrames {
  std::vector<int32_t> codes;  // [frames, num_quantizers], row-major
  int64_t frames = 0;
  int64_t num_quantizers = 0;
};

// Every row must hold exactly num_quantizers integers in [0, codebook_size); at least one row.
// Errors name the file, the frame and the codebook.
Result<CodeFrames> read_codes_json(const std::string& path, int64_t num_quantizers, int64_t codebook_size);
Result<CodeFrames> parse_codes_json(const std::string& text, const std::string& label,
                                    int64_t num_quantizers, int64_t codebook_size);
// One frame per line.
std::string codes_to_json(const int32_t* codes, int64_t frames, int64_t num_quantizers);
Status write_codes_json(const std::string& path, const int32_t* codes, int64_t frames, int64_t num_quantizers);

}  // namespace chorus::codec
