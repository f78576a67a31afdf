#include "server/multipart.h"

#include <algorithm>
#include <cctype>

namespace chorus::server {

namespace {

Error bad(const std::string& m) { return make_error(ErrorCode::kInvalidArgument, "multipart body: " + m); }

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of `key` in "form-data; name=\"x\"; filename=\"y\"" (quoted or a token).
std::optional<std::string> header_param(std::string_view s, std::string_view key) {
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == ';')) ++i;
    const size_t k0 = i;
    while (i < s.size() && s[i] != '=' && s[i] != ';') ++i;
    const std::string k = lower(trim(s.substr(k0, i - k0)));
    std::string v;
    if (i < s.size() && s[i] == '=') {
      ++i;
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
      if (i < s.size() && s[i] == '"') {
        ++i;
        bool closed = false;
        while (i < s.size()) {
          if (s[i] == '\\' && i + 1 < s.size()) {
            v.push_back(s[i + 1]);
            i += 2;
            continue;
          }
          if (s[i] == '"') {
            closed = true;
            ++i;
            break;
          }
          v.push_back(s[i++]);
        }
        if (!closed) return std::nullopt;
        while (i < s.size() && s[i] != ';') ++i;
      } else {
        const size_t v0 = i;
        while (i < s.size() && s[i] != ';') ++i;
        v = std::string(trim(s.substr(v0, i - v0)));
      }
    }
    if (k == key) return v;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> multipart_boundary(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data" || semi == std::string_view::npos) return std::nullopt;
  auto b = header_param(content_type.substr(semi + 1), "boundary");
  if (!b || b->empty() || b->size() > 70) return std::nullopt;
  return b;
}

Result<std::vector<FormPart>> parse_multipart(std::string_view body, const std::string& boundary, size_t max_parts) {
  const std::string delim = "--" + boundary;
  std::vector<FormPart> parts;
  // The preamble before the first delimiter is ignored (RFC 2046).
  size_t pos = body.find(delim);
  if (pos == std::string_view::npos) return bad("no boundary delimiter found");
  pos += delim.size();
  for (;;) {
    if (body.substr(pos, 2) == "--") return parts;  // close delimiter
    if (body.substr(pos, 2) != "\r\n") return bad("malformed delimiter line");
    pos += 2;
    if (parts.size() >= max_parts) return bad("too many parts");
    FormPart part;
    bool has_disposition = false;
    // Headers up to an empty line.
    for (int n = 0;; ++n) {
      if (n > 16) return bad("too many part headers");
      const size_t eol = body.find("\r\n", pos);
      if (eol == std::string_view::npos || eol - pos > 4096) return bad("malformed part headers");
      const std::string_view line = body.substr(pos, eol - pos);
      pos = eol + 2;
      if (line.empty()) break;
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) return bad("malformed part header");
      const std::string name = lower(trim(line.substr(0, colon)));
      const std::string_view value = trim(line.substr(colon + 1));
      if (name == "content-disposition") {
        const size_t semi = value.find(';');
        if (lower(trim(value.substr(0, semi))) != "form-data" || semi == std::string_view::npos)
          return bad("a part's Content-Disposition must be form-data");
        auto nm = header_param(value.substr(semi + 1), "name");
        if (!nm || nm->empty()) return bad("a part has no name");
        part.name = *nm;
        if (auto fn = header_param(value.substr(semi + 1), "filename")) part.filename = *fn;
        has_disposition = true;
      } else if (name == "content-type") {
        part.content_type = std::string(value);
      }
    }
    if (!has_disposition) return bad("a part has no Content-Disposition");
    const std::string end_delim = "\r\n" + delim;
    const size_t end = body.find(end_delim, pos);
    if (end == std::string_view::npos) return bad("a part is not terminated by the boundary");
    part.data = std::string(body.substr(pos, end - pos));
    parts.push_back(std::move(part));
    pos = end + end_delim.size();
  }
}

}  // namespace chorus::server
