#include "io/json_util.h"

#include <charconv>
#include <cmath>
#include <new>

#include "io/file_util.h"

namespace chorus::io {
namespace {

// Builds the DOM from SAX events so that duplicate keys and nesting depth are checked while parsing
// (nlohmann's own DOM parser silently keeps the last duplicate).
class StrictDomBuilder {
 public:
  StrictDomBuilder(Json& root, const std::string& label, int max_depth)
      : root_(root), label_(label), max_depth_(max_depth) {}

  const std::optional<Error>& error() const { return error_; }

  bool null() { return add(Json(nullptr)); }
  bool boolean(bool v) { return add(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return add(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return add(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return add(Json(v)); }
  bool string(Json::string_t& v) { return add(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return fail(ErrorCode::kInvalidFormat, "unexpected binary value"); }

  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& k) {
    Json& obj = *stack_.back();
    if (obj.contains(k)) return fail(ErrorCode::kInvalidFormat, "duplicate key '" + k + "'");
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's message starts with "[json.exception...] "; keep only the human part.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    return fail(ErrorCode::kInvalidFormat, "not valid JSON at byte " + std::to_string(byte) + ": " + what);
  }

 private:
  bool fail(ErrorCode code, std::string msg) {
    if (!error_) error_ = make_error(code, label_ + ": " + std::move(msg));
    return false;
  }

  // Places `v` where the parser is (root, array element or object member) and returns its address.
  Json* place(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    Json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }

  bool add(Json v) {
    place(std::move(v));
    return true;
  }

  bool open(Json container) {
    if (static_cast<int>(stack_.size()) >= max_depth_)
      return fail(ErrorCode::kResourceExhausted,
                  "nested deeper than " + std::to_string(max_depth_) + " levels");
    stack_.push_back(place(std::move(container)));
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  Json& root_;
  const std::string& label_;
  int max_depth_;
  std::vector<Json*> stack_;  // open containers; each is inside the previous one, so stays put
  std::string key_;
  std::optional<Error> error_;
};

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

std::string type_phrase(const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_float: return "a number (" + format_double(v.get<double>()) + ")";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    default: return "null";
  }
}

// Reads an exact integer out of any JSON number; nullopt for anything else (or a fraction).
std::optional<int64_t> exact_int(const Json& v) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 is the first double above INT64_MAX.
    if (!std::isfinite(d) || std::trunc(d) != d || d < -9223372036854775808.0 ||
        d >= 9223372036854775808.0)
      return std::nullopt;
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::string number_text(const Json& v) {
  if (v.is_number_float()) return format_double(v.get<double>());
  return v.dump();
}

Error missing(const std::string& where) {
  return make_error(ErrorCode::kInvalidFormat, where + " is missing");
}

Error wrong_type(const std::string& where, const char* expected, const Json& v) {
  return make_error(ErrorCode::kInvalidFormat,
                    where + " must be " + expected + ", not " + type_phrase(v));
}

// Validates one integer element `v` reported as `where`.
Result<int64_t> bounded_int(const Json& v, const std::string& where, int64_t lo, int64_t hi) {
  if (!v.is_number()) return wrong_type(where, "an integer", v);
  const std::optional<int64_t> i = exact_int(v);
  if (!i || *i < lo || *i > hi)
    return make_error(ErrorCode::kOutOfRange, where + " = " + number_text(v) + " is out of range [" +
                                                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return *i;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1Fu; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0Fu; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07u; }
    else return false;  // continuation byte, C0/C1 (always overlong) or F5+ (beyond U+10FFFF)
    if (end - p < len) return false;
    for (int i = 1; i < len; ++i) {
      if ((p[i] & 0xC0u) != 0x80u) return false;
      cp = (cp << 6) | (p[i] & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;  // overlong
    if (cp >= 0xD800 && cp <= 0xDFFF) return false;                             // surrogate
    if (cp > 0x10FFFF) return false;
    p += len;
  }
  return true;
}

Result<Json> parse_json(std::string_view text, const std::string& label, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    return make_error(ErrorCode::kResourceExhausted,
                      label + ": " + std::to_string(text.size()) + " bytes of JSON, more than the " +
                          std::to_string(limits.max_bytes) + "-byte limit");
  if (!is_valid_utf8(text)) return make_error(ErrorCode::kInvalidFormat, label + ": not valid UTF-8");
  // nlohmann stops at a NUL byte as if the input ended there, which would let anything follow it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    return make_error(ErrorCode::kInvalidFormat,
                      label + ": not valid JSON: NUL byte at offset " + std::to_string(nul));
  Json root;
  StrictDomBuilder builder(root, label, limits.max_depth);
  try {
    const bool ok = Json::sax_parse(text.begin(), text.end(), &builder);
    if (builder.error()) return *builder.error();
    if (!ok) return make_error(ErrorCode::kInvalidFormat, label + ": not valid JSON");
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, label + ": out of memory parsing JSON");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidFormat, label + ": not valid JSON: " + e.what());
  }
  return root;
}

Result<Json> read_json_file(const std::string& path, const JsonLimits& limits) {
  CHORUS_ASSIGN(std::string text, read_file_capped(path, limits.max_bytes));
  return parse_json(text, path, limits);
}

Result<JsonObject> JsonObject::root(const Json& j, std::string file) {
  if (!j.is_object())
    return make_error(ErrorCode::kInvalidFormat, file + ": must be a JSON object, not " + type_phrase(j));
  return JsonObject(&j, std::move(file), "");
}

const Json* JsonObject::find(std::string_view key) const {
  const auto it = j_->find(key);
  if (it == j_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonObject::has(std::string_view key) const { return find(key) != nullptr; }

std::string JsonObject::key_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

std::string JsonObject::where(std::string_view key) const { return file_ + ": " + key_path(key); }

Result<JsonObject> JsonObject::object(const char* key) const {
  CHORUS_ASSIGN(std::optional<JsonObject> child, optional_object(key));
  if (!child) return missing(where(key));
  return *std::move(child);
}

Result<std::optional<JsonObject>> JsonObject::optional_object(const char* key) const {
  const Json* v = find(key);
  if (!v) return std::optional<JsonObject>();
  if (!v->is_object()) return wrong_type(where(key), "an object", *v);
  return std::optional<JsonObject>(JsonObject(v, file_, key_path(key)));
}

Result<int64_t> JsonObject::get_int(const char* key, int64_t lo, int64_t hi,
                                    std::optional<int64_t> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    return missing(where(key));
  }
  return bounded_int(*v, where(key), lo, hi);
}

Result<double> JsonObject::get_float(const char* key, double lo, double hi,
                                     std::optional<double> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    return missing(where(key));
  }
  if (!v->is_number()) return wrong_type(where(key), "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    return make_error(ErrorCode::kOutOfRange, where(key) + " = " + number_text(*v) +
                                                  " is out of range [" + format_double(lo) + ", " +
                                                  format_double(hi) + "]");
  return d;
}

Result<bool> JsonObject::get_bool(const char* key, std::optional<bool> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *fallback;
    return missing(where(key));
  }
  if (!v->is_boolean()) return wrong_type(where(key), "true or false", *v);
  return v->get<bool>();
}

Result<std::string> JsonObject::get_string(const char* key, std::optional<std::string> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *std::move(fallback);
    return missing(where(key));
  }
  if (!v->is_string()) return wrong_type(where(key), "a string", *v);
  return v->get<std::string>();
}

Result<std::vector<int64_t>> JsonObject::get_int_array(
    const char* key, int64_t lo, int64_t hi, size_t min_len, size_t max_len,
    std::optional<std::vector<int64_t>> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *std::move(fallback);
    return missing(where(key));
  }
  if (!v->is_array()) return wrong_type(where(key), "an array of integers", *v);
  if (v->size() < min_len || v->size() > max_len)
    return make_error(ErrorCode::kOutOfRange,
                      where(key) + " has " + std::to_string(v->size()) + " elements, expected " +
                          std::to_string(min_len) + " to " + std::to_string(max_len));
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    CHORUS_ASSIGN(int64_t x, bounded_int((*v)[i], where(key) + "[" + std::to_string(i) + "]", lo, hi));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<std::string>> JsonObject::get_string_array(
    const char* key, size_t max_len, std::optional<std::vector<std::string>> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *std::move(fallback);
    return missing(where(key));
  }
  if (!v->is_array()) return wrong_type(where(key), "an array of strings", *v);
  if (v->size() > max_len)
    return make_error(ErrorCode::kOutOfRange, where(key) + " has " + std::to_string(v->size()) +
                                                  " elements, more than " + std::to_string(max_len));
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& e = (*v)[i];
    if (!e.is_string())
      return wrong_type(where(key) + "[" + std::to_string(i) + "]", "a string", e);
    out.push_back(e.get<std::string>());
  }
  return out;
}

Result<std::map<std::string, int64_t>> JsonObject::get_int_map(
    const char* key, int64_t lo, int64_t hi, size_t max_entries,
    std::optional<std::map<std::string, int64_t>> fallback) const {
  const Json* v = find(key);
  if (!v) {
    if (fallback) return *std::move(fallback);
    return missing(where(key));
  }
  if (!v->is_object()) return wrong_type(where(key), "an object of integers", *v);
  if (v->size() > max_entries)
    return make_error(ErrorCode::kOutOfRange, where(key) + " has " + std::to_string(v->size()) +
                                                  " entries, more than " + std::to_string(max_entries));
  std::map<std::string, int64_t> out;
  for (const auto& [name, value] : v->items()) {
    CHORUS_ASSIGN(int64_t x, bounded_int(value, where(key) + "." + name, lo, hi));
    out.emplace(name, x);
  }
  return out;
}

Status write_json_file(const std::string& path, const Json& j) {
  return write_file(path, j.dump(1, ' ', false, Json::error_handler_t::replace) + "\n");
}

}  // namespace chorus::io
