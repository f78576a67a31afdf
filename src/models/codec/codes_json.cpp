#include "models/codec/codes_json.h"

#include <fstream>

#include "io/file_util.h"
#include "io/json_util.h"

namespace chorus::codec {

namespace {
constexpr uint64_t kMaxCodesJsonBytes = 256ull << 20;  // ~3 million frames (~70 hours)
}

Result<CodeFrames> parse_codes_json(const std::string& text, const std::string& label,
                                    int64_t num_quantizers, int64_t codebook_size) {
  io::JsonLimits limits;
  limits.max_bytes = kMaxCodesJsonBytes;
  CHORUS_ASSIGN(const io::Json root, io::parse_json(text, label, limits));
  if (!root.is_object() || !root.contains("codes"))
    return make_error(ErrorCode::kInvalidFormat, label + ": expected an object {\"codes\": [[...], ...]}");
  const io::Json& rows = root["codes"];
  if (!rows.is_array()) return make_error(ErrorCode::kInvalidFormat, label + ": \"codes\" is not an array");
  if (rows.empty()) return make_error(ErrorCode::kInvalidArgument, label + ": \"codes\" is empty (no frames to decode)");
  CodeFrames f;
  f.num_quantizers = num_quantizers;
  f.frames = static_cast<int64_t>(rows.size());
  f.codes.reserve(rows.size() * static_cast<size_t>(num_quantizers));
  for (size_t t = 0; t < rows.size(); ++t) {
    const io::Json& row = rows[t];
    const std::string where = label + ": codes[" + std::to_string(t) + "]";
    if (!row.is_array()) return make_error(ErrorCode::kInvalidFormat, where + " is not an array");
    if (static_cast<int64_t>(row.size()) != num_quantizers)
      return make_error(ErrorCode::kShapeMismatch, where + " has " + std::to_string(row.size()) +
                                                       " codes, expected " + std::to_string(num_quantizers) +
                                                       " (one per codebook)");
    for (size_t k = 0; k < row.size(); ++k) {
      const io::Json& v = row[k];
      const std::string at = where + "[" + std::to_string(k) + "]";
      if (!v.is_number_integer()) return make_error(ErrorCode::kInvalidFormat, at + " is not an integer");
      const int64_t c = v.is_number_unsigned() ? (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                                                      ? INT64_MAX
                                                      : static_cast<int64_t>(v.get<uint64_t>()))
                                               : v.get<int64_t>();
      if (c < 0 || c >= codebook_size)
        return make_error(ErrorCode::kOutOfRange, at + " = " + std::to_string(c) + " is outside [0, " +
                                                      std::to_string(codebook_size - 1) + "]");
      f.codes.push_back(static_cast<int32_t>(c));
    }
  }
  return f;
}

Result<CodeFrames> read_codes_json(const std::string& path, int64_t num_quantizers, int64_t codebook_size) {
  CHORUS_ASSIGN(const std::string text, io::read_file_capped(path, kMaxCodesJsonBytes));
  return parse_codes_json(text, path, num_quantizers, codebook_size);
}

std::string codes_to_json(const int32_t* codes, int64_t frames, int64_t num_quantizers) {
  std::string s = "{\"codes\": [";
  for (int64_t t = 0; t < frames; ++t) {
    s += t ? ",\n  [" : "\n  [";
    for (int64_t k = 0; k < num_quantizers; ++k) {
      if (k) s += ", ";
      s += std::to_string(codes[t * num_quantizers + k]);
    }
    s += "]";
  }
  s += frames ? "\n]}\n" : "]}\n";
  return s;
}

Status write_codes_json(const std::string& path, const int32_t* codes, int64_t frames, int64_t num_quantizers) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return make_error(ErrorCode::kIo, path + ": cannot write");
  out << codes_to_json(codes, frames, num_quantizers);
  out.flush();
  return out ? ok_status() : make_error(ErrorCode::kIo, path + ": write failed");
}

}  // namespace chorus::codec
