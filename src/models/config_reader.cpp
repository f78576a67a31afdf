#include "models/config_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

namespace chorus {

namespace {

// SAX parse callback that rejects duplicate keys and deep nesting (hostile configs).
struct StrictJson {
  static Result<nlohmann::json> parse(const std::string& text, const std::string& label) {
    std::vector<std::vector<std::string>> keys_stack;
    std::string dup;
    int depth = 0;
    bool too_deep = false;
    auto cb = [&](int d, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
      using E = nlohmann::json::parse_event_t;
      depth = d;
      if (d > 64) too_deep = true;
      if (ev == E::object_start) keys_stack.emplace_back();
      else if (ev == E::object_end) { if (!keys_stack.empty()) keys_stack.pop_back(); }
      else if (ev == E::key && !keys_stack.empty()) {
        const std::string k = parsed.get<std::string>();
        auto& ks = keys_stack.back();
        if (std::find(ks.begin(), ks.end(), k) != ks.end() && dup.empty()) dup = k;
        ks.push_back(k);
      }
      return !too_deep && dup.empty();
    };
    nlohmann::json j = nlohmann::json::parse(text, cb, /*allow_exceptions=*/false);
    (void)depth;
    if (too_deep) return make_error(ErrorCode::kInvalidFormat, label + ": JSON nested deeper than 64 levels");
    if (!dup.empty()) return make_error(ErrorCode::kInvalidFormat, label + ": duplicate key \"" + dup + "\"");
    if (j.is_discarded()) return make_error(ErrorCode::kInvalidFormat, label + ": not valid JSON");
    if (!j.is_object()) return make_error(ErrorCode::kInvalidFormat, label + ": top level is not a JSON object");
    return j;
  }
};

}  // namespace

Result<nlohmann::json> ConfigReader::parse_file(const std::string& file, uint64_t max_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(ErrorCode::kNotFound, file + ": cannot open");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(in.tellg(), 0));
  if (size > max_bytes)
    return make_error(ErrorCode::kResourceExhausted, file + ": " + std::to_string(size) +
                                                         " bytes is larger than the " +
                                                         std::to_string(max_bytes) + "-byte limit for a config");
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in) return make_error(ErrorCode::kIo, file + ": read failed");
  return StrictJson::parse(text, file);
}

const nlohmann::json* ConfigReader::find(const char* key) const {
  auto it = obj_->find(key);
  return it == obj_->end() ? nullptr : &*it;
}

bool ConfigReader::has(const char* key) const { return find(key) != nullptr; }

bool ConfigReader::is_null(const char* key) const {
  const auto* v = find(key);
  return !v || v->is_null();
}

Error ConfigReader::missing(const char* key) const {
  return make_error(ErrorCode::kInvalidFormat, where(key) + " is missing");
}

Error ConfigReader::wrong_type(const char* key, const char* expected) const {
  return make_error(ErrorCode::kInvalidFormat, where(key) + " should be " + expected);
}

Result<int64_t> ConfigReader::i64(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> def) const {
  const auto* v = find(key);
  if (!v || v->is_null()) {
    if (def) return *def;
    return missing(key);
  }
  int64_t x;
  if (v->is_number_integer()) x = v->get<int64_t>();
  else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return make_error(ErrorCode::kOutOfRange, where(key) + " is too large");
    x = static_cast<int64_t>(u);
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return wrong_type(key, "an integer");
  }
  if (x < lo || x > hi)
    return make_error(ErrorCode::kOutOfRange, where(key) + " = " + std::to_string(x) + " is outside [" +
                                                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

Result<double> ConfigReader::f64(const char* key, double lo, double hi, std::optional<double> def) const {
  const auto* v = find(key);
  if (!v || v->is_null()) {
    if (def) return *def;
    return missing(key);
  }
  if (!v->is_number()) return wrong_type(key, "a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    std::ostringstream os;
    os << where(key) << " = " << x << " is outside [" << lo << ", " << hi << "]";
    return make_error(ErrorCode::kOutOfRange, os.str());
  }
  return x;
}

Result<bool> ConfigReader::boolean(const char* key, std::optional<bool> def) const {
  const auto* v = find(key);
  if (!v || v->is_null()) {
    if (def) return *def;
    return missing(key);
  }
  if (!v->is_boolean()) return wrong_type(key, "true or false");
  return v->get<bool>();
}

Result<std::string> ConfigReader::str(const char* key, std::optional<std::string> def) const {
  const auto* v = find(key);
  if (!v || v->is_null()) {
    if (def) return *def;
    return missing(key);
  }
  if (!v->is_string()) return wrong_type(key, "a string");
  return v->get<std::string>();
}

Result<std::vector<int64_t>> ConfigReader::i64_list(const char* key, int64_t lo, int64_t hi, size_t max_len,
                                                    std::optional<std::vector<int64_t>> def) const {
  const auto* v = find(key);
  if (!v || v->is_null()) {
    if (def) return *def;
    return missing(key);
  }
  if (!v->is_array()) return wrong_type(key, "a list of integers");
  if (v->size() > max_len)
    return make_error(ErrorCode::kOutOfRange, where(key) + " has " + std::to_string(v->size()) +
                                                  " entries, at most " + std::to_string(max_len) + " allowed");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    nlohmann::json wrap = nlohmann::json::object();
    wrap["v"] = (*v)[i];
    ConfigReader r(wrap, where(key) + "[" + std::to_string(i) + "]");
    auto x = r.i64("v", lo, hi);
    if (!x.ok())
      return make_error(x.error().code, where(key) + "[" + std::to_string(i) + "] is not an integer in [" +
                                            std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out.push_back(*x);
  }
  return out;
}

Result<std::map<std::string, int64_t>> ConfigReader::int_map(const char* key, int64_t lo, int64_t hi,
                                                             bool required) const {
  const auto* v = find(key);
  std::map<std::string, int64_t> out;
  if (!v || v->is_null()) {
    if (required) return missing(key);
    return out;
  }
  if (!v->is_object()) return wrong_type(key, "an object of name: integer");
  if (v->size() > 100000) return make_error(ErrorCode::kOutOfRange, where(key) + " has too many entries");
  ConfigReader sub(*v, where(key));
  for (auto it = v->begin(); it != v->end(); ++it) {
    auto x = sub.i64(it.key().c_str(), lo, hi);
    if (!x.ok()) return std::move(x).error();
    std::string name = it.key();
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[name] = *x;
  }
  return out;
}

Result<ConfigReader> ConfigReader::child(const char* key) const {
  const auto* v = find(key);
  if (!v || v->is_null()) return missing(key);
  if (!v->is_object()) return wrong_type(key, "an object");
  return ConfigReader(*v, where(key));
}

}  // namespace chorus
