// multipart/form-data bodies (RFC 7578), as the OpenAI SDKs send file uploads: the boundary from
// the Content-Type header, then parts with a Content-Disposition naming the field. Untrusted input:
// malformed bodies give an error, part counts and header sizes are bounded.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace chorus::server {

struct FormPart {
  std::string name;
  std::string filename;      // empty when the part is not a file
  std::string content_type;  // of the part, if given
  std::string data;
};

// The boundary parameter of a multipart/form-data Content-Type; nullopt for any other type.
std::optional<std::string> multipart_boundary(std::string_view content_type);
Result<std::vector<FormPart>> parse_multipart(std::string_view body, const std::string& boundary, size_t max_parts = 32);

}  // namespace chorus::server
