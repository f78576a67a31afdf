#include "io/config_reader.h"

#include <cctype>

namespace chorus {

ConfigReader::ConfigReader(const nlohmann::json& obj, std::string path) : path_(std::move(path)) {
  auto o = io::JsonObject::root(obj, path_);
  if (o.ok()) obj_ = std::move(o).value();
}

Result<nlohmann::json> ConfigReader::parse_file(const std::string& file) {
  CHORUS_ASSIGN(auto j, io::read_json_file(file));
  if (!j.is_object()) return make_error(ErrorCode::kInvalidFormat, file + ": top level is not a JSON object");
  return j;
}

Error ConfigReader::not_object() const {
  return make_error(ErrorCode::kInvalidFormat, path_ + " is not a JSON object");
}

Result<int64_t> ConfigReader::i64(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> def) const {
  if (!obj_) return not_object();
  return obj_->get_int(key, lo, hi, def);
}

Result<double> ConfigReader::f64(const char* key, double lo, double hi, std::optional<double> def) const {
  if (!obj_) return not_object();
  return obj_->get_float(key, lo, hi, def);
}

Result<bool> ConfigReader::boolean(const char* key, std::optional<bool> def) const {
  if (!obj_) return not_object();
  return obj_->get_bool(key, def);
}

Result<std::string> ConfigReader::str(const char* key, std::optional<std::string> def) const {
  if (!obj_) return not_object();
  return obj_->get_string(key, std::move(def));
}

Result<std::vector<int64_t>> ConfigReader::i64_list(const char* key, int64_t lo, int64_t hi, size_t max_len,
                                                    std::optional<std::vector<int64_t>> def) const {
  if (!obj_) return not_object();
  return obj_->get_int_array(key, lo, hi, 0, max_len, std::move(def));
}

Result<std::map<std::string, int64_t>> ConfigReader::int_map(const char* key, int64_t lo, int64_t hi,
                                                             bool required) const {
  if (!obj_) return not_object();
  std::optional<std::map<std::string, int64_t>> def;
  if (!required) def.emplace();
  CHORUS_ASSIGN(auto raw, obj_->get_int_map(key, lo, hi, 100000, std::move(def)));
  std::map<std::string, int64_t> out;
  for (auto& [k, v] : raw) {
    std::string name = k;
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[name] = v;
  }
  return out;
}

Result<ConfigReader> ConfigReader::child(const char* key) const {
  if (!obj_) return not_object();
  CHORUS_ASSIGN(auto sub, obj_->object(key));
  return ConfigReader(std::move(sub), where(key));
}

}  // namespace chorus
