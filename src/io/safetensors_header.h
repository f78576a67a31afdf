// Internal to the safetensors loader: parses and validates the JSON header against the size of the
// data section that follows it. Kept apart from the file handling so that the same checks run on
// files, bytes in memory and fuzz inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace chorus::io::detail {

struct ParsedHeader {
  std::vector<TensorInfo> infos;  // sorted by data offset
  std::map<std::string, size_t, std::less<>> index;  // name -> position in infos
  std::map<std::string, std::string> metadata;
};

// `header` is the N bytes after the 8-byte length; `data_bytes` is what the file holds after them.
// On success every tensor's bytes lie in [0, data_bytes), the tensors tile that range exactly and
// each range is as long as its dtype and shape require.
Result<ParsedHeader> parse_header(std::string_view header, uint64_t data_bytes,
                                  const std::string& label, const SafetensorsLimits& limits);

}  // namespace chorus::io::detail
