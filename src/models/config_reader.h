// Typed, bounded reads from a parsed config.json. Every integer a model uses is range-checked here
// before it can size an allocation or index a table; errors name the file and the key path
// ("config.json: talker_config.num_hidden_layers = 1000000000 is outside [1, 512]").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace chorus {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& obj, std::string path) : obj_(&obj), path_(std::move(path)) {}

  // Parses a JSON file (size-capped, duplicate keys rejected) whose root must be an object.
  static Result<nlohmann::json> parse_file(const std::string& file, uint64_t max_bytes = 16u << 20);

  bool has(const char* key) const;
  bool is_null(const char* key) const;
  Result<int64_t> i64(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> def = std::nullopt) const;
  Result<double> f64(const char* key, double lo, double hi, std::optional<double> def = std::nullopt) const;
  Result<bool> boolean(const char* key, std::optional<bool> def = std::nullopt) const;
  Result<std::string> str(const char* key, std::optional<std::string> def = std::nullopt) const;
  Result<std::vector<int64_t>> i64_list(const char* key, int64_t lo, int64_t hi, size_t max_len,
                                        std::optional<std::vector<int64_t>> def = std::nullopt) const;
  // {"name": int} maps (language and speaker ids), keys lower-cased as the official code does.
  Result<std::map<std::string, int64_t>> int_map(const char* key, int64_t lo, int64_t hi, bool required = false) const;
  Result<ConfigReader> child(const char* key) const;
  const std::string& path() const { return path_; }
  std::string where(const char* key) const { return path_ + "." + key; }

 private:
  const nlohmann::json* find(const char* key) const;
  Error missing(const char* key) const;
  Error wrong_type(const char* key, const char* expected) const;

  const nlohmann::json* obj_;
  std::string path_;
};

}  // namespace chorus
