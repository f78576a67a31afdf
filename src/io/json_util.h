// Strict JSON for untrusted files (config.json, index files): a size cap, UTF-8 checked, duplicate
// keys and deep nesting rejected while parsing, and typed getters with bounds whose errors name the
// file and the key path, e.g. "config.json: talker_config.num_hidden_layers = 1000000000 is out of
// range [1, 512]". Nothing here throws.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace chorus::io {

using Json = nlohmann::json;

struct JsonLimits {
  uint64_t max_bytes = 16ull << 20;
  int max_depth = 64;
};

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s);

// `label` names the text in errors (usually the file name).
Result<Json> parse_json(std::string_view text, const std::string& label, const JsonLimits& limits = {});
Result<Json> read_json_file(const std::string& path, const JsonLimits& limits = {});
// Writes `j` indented by one space (the layout of Hugging Face config files), newline-terminated.
Status write_json_file(const std::string& path, const Json& j);

// A JSON object plus where it sits ("config.json" and the key path "talker_config"), so getter
// errors can say exactly which value is wrong. It points into a Json the caller keeps alive.
// A key whose value is null counts as absent (Hugging Face configs write "sliding_window": null).
class JsonObject {
 public:
  // kInvalidFormat unless `j` is an object.
  static Result<JsonObject> root(const Json& j, std::string file);

  bool has(std::string_view key) const;  // present and not null
  const Json& json() const { return *j_; }
  // "talker_config.num_hidden_layers" for `key`; used in messages.
  std::string key_path(std::string_view key) const;
  // "config.json: talker_config.num_hidden_layers": the prefix of every error about `key`.
  std::string where(std::string_view key) const;

  Result<JsonObject> object(const char* key) const;                       // required
  Result<std::optional<JsonObject>> optional_object(const char* key) const;  // absent -> nullopt

  // Integers must be exact (2.0 is accepted as 2, 2.5 is not).
  Result<int64_t> get_int(const char* key, int64_t lo, int64_t hi,
                          std::optional<int64_t> fallback = std::nullopt) const;
  // Finite and within [lo, hi]; integers are accepted.
  Result<double> get_float(const char* key, double lo, double hi,
                           std::optional<double> fallback = std::nullopt) const;
  Result<bool> get_bool(const char* key, std::optional<bool> fallback = std::nullopt) const;
  Result<std::string> get_string(const char* key,
                                 std::optional<std::string> fallback = std::nullopt) const;
  // Each element within [lo, hi], length within [min_len, max_len].
  Result<std::vector<int64_t>> get_int_array(
      const char* key, int64_t lo, int64_t hi, size_t min_len, size_t max_len,
      std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  Result<std::vector<std::string>> get_string_array(
      const char* key, size_t max_len,
      std::optional<std::vector<std::string>> fallback = std::nullopt) const;
  // An object of name -> integer (speaker or language ids); each value within [lo, hi].
  Result<std::map<std::string, int64_t>> get_int_map(
      const char* key, int64_t lo, int64_t hi, size_t max_entries,
      std::optional<std::map<std::string, int64_t>> fallback = std::nullopt) const;

 private:
  JsonObject(const Json* j, std::string file, std::string path)
      : j_(j), file_(std::move(file)), path_(std::move(path)) {}
  // The value of `key`, or nullptr when absent or null.
  const Json* find(std::string_view key) const;

  const Json* j_;
  std::string file_;
  std::string path_;  // dotted key path of this object inside the file; empty for the root
};

}  // namespace chorus::io
