// Model-config reads on top of io::JsonObject (strict parsing, bounded typed getters whose errors
// name the file and key path). Adds what model configs need beyond that: name maps lower-cased as
// the official code does, and a path() for messages about a whole section.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/json_util.h"

namespace chorus {

class ConfigReader {
 public:
  // `obj` must outlive the reader. A non-object makes every getter fail with a clear error.
  ConfigReader(const nlohmann::json& obj, std::string path);

  // Parses a JSON file (size-capped, duplicate keys rejected) whose root must be an object.
  static Result<nlohmann::json> parse_file(const std::string& file);

  bool has(const char* key) const { return obj_ && obj_->has(key); }
  bool is_null(const char* key) const { return !has(key); }
  Result<int64_t> i64(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> def = std::nullopt) const;
  Result<double> f64(const char* key, double lo, double hi, std::optional<double> def = std::nullopt) const;
  Result<bool> boolean(const char* key, std::optional<bool> def = std::nullopt) const;
  Result<std::string> str(const char* key, std::optional<std::string> def = std::nullopt) const;
  Result<std::vector<int64_t>> i64_list(const char* key, int64_t lo, int64_t hi, size_t max_len,
                                        std::optional<std::vector<int64_t>> def = std::nullopt) const;
  // {"name": int} maps (language and speaker ids); keys lower-cased as the official code does.
  Result<std::map<std::string, int64_t>> int_map(const char* key, int64_t lo, int64_t hi, bool required = false) const;
  Result<ConfigReader> child(const char* key) const;
  // "config.json: talker_config" — the prefix for messages about this section.
  const std::string& path() const { return path_; }
  std::string where(const char* key) const { return obj_ ? obj_->where(key) : path_ + "." + key; }

 private:
  explicit ConfigReader(io::JsonObject obj, std::string path) : obj_(std::move(obj)), path_(std::move(path)) {}
  Error not_object() const;

  std::optional<io::JsonObject> obj_;
  std::string path_;
};

}  // namespace chorus
