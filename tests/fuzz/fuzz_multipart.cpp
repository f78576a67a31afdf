// multipart/form-data as POST /v1/audio/voices receives it: the first line of the input is the
// Content-Type header, the rest the body. Every input must give parts or an error (never a crash,
// a hang or unbounded memory); accepted parts must be named, bounded in number, lie inside the
// body, and none may run across a delimiter.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/multipart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus::server;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t eol = in.find('\n');
  const std::string_view content_type = in.substr(0, eol);
  const std::string_view body = eol == std::string_view::npos ? std::string_view() : in.substr(eol + 1);
  const auto boundary = multipart_boundary(content_type);
  if (!boundary) return 0;
  if (boundary->empty() || boundary->size() > 70) std::abort();
  constexpr size_t kMaxParts = 8;
  auto parts = parse_multipart(body, *boundary, kMaxParts);
  if (!parts.ok()) {
    if (parts.error().message.empty()) std::abort();
    return 0;
  }
  if (parts->size() > kMaxParts) std::abort();
  const std::string delim = "\r\n--" + *boundary;
  size_t total = 0;
  for (const FormPart& p : *parts) {
    if (p.name.empty()) std::abort();
    if (p.data.find(delim) != std::string::npos) std::abort();
    if (body.find(p.data) == std::string_view::npos) std::abort();
    total += p.data.size();
  }
  if (total > body.size()) std::abort();
  return 0;
}
