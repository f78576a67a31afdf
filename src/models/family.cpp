#include "models/family.h"

#include <filesystem>

#include "io/model_dir.h"
#include "io/config_reader.h"

namespace chorus {

const char* family_name(Family f) { return f == Family::kQwen3Tts ? "qwen3-tts" : "breeze-tts"; }

Result<Family> family_from_name(const std::string& name) {
  if (name == "qwen3-tts") return Family::kQwen3Tts;
  if (name == "breeze-tts") return Family::kBreezeTts;
  return make_error(ErrorCode::kInvalidArgument, "unknown model family \"" + name + "\" (expected qwen3-tts or breeze-tts)");
}

Result<Family> detect_family(const std::string& spec) {
  CHORUS_ASSIGN(const std::string dir, io::resolve_model_dir(spec));
  const std::string file = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::exists(file))
    return make_error(ErrorCode::kNotFound, dir + ": no config.json (expected a Hugging Face checkpoint folder)");
  CHORUS_ASSIGN(auto root, ConfigReader::parse_file(file));
  ConfigReader r(root, file);
  CHORUS_ASSIGN(auto mt, r.str("model_type", std::string("")));
  if (mt == "qwen3_tts") return Family::kQwen3Tts;
  if (mt == "breeze") return Family::kBreezeTts;
  return make_error(ErrorCode::kUnsupported, file + ": model_type \"" + mt + "\" is not a family chorus knows "
                                                   "(qwen3_tts, breeze)");
}

}  // namespace chorus
