#include "models/codec/codec_folder.h"

#include <filesystem>

#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/config_reader.h"

namespace chorus::codec {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCodecModelType = "qwen3_tts_tokenizer_12hz";

Result<std::string> model_type_of(const fs::path& config) {
  CHORUS_ASSIGN(auto root, ConfigReader::parse_file(config.string()));
  ConfigReader r(root, config.string());
  return r.str("model_type", std::string(""));
}

}  // namespace

Result<std::string> find_codec_dir(const std::string& spec) {
  std::error_code ec;
  CHORUS_ASSIGN(const std::string dir, io::resolve_model_dir(spec));
  const fs::path root(dir);
  if (fs::exists(root / "config.json", ec)) {
    CHORUS_ASSIGN(const std::string type, model_type_of(root / "config.json"));
    if (type == kCodecModelType) return root.string();
  }
  for (const char* sub : {"speech_tokenizer", "audio_tokenizer"}) {
    const fs::path p = root / sub;
    if (fs::exists(p / "config.json", ec)) return p.string();
  }
  return make_error(ErrorCode::kNotFound,
                    dir + ": no speech codec found (expected speech_tokenizer/ or audio_tokenizer/, or a "
                          "folder whose config.json has model_type " + kCodecModelType + ")");
}

Result<CodecModel> load_codec(const std::string& dir) {
  CHORUS_ASSIGN(std::string codec_dir, find_codec_dir(dir));
  const fs::path config_file = fs::path(codec_dir) / "config.json";
  CHORUS_ASSIGN(const std::string type, model_type_of(config_file));
  if (type != kCodecModelType)
    return make_error(ErrorCode::kUnsupported, config_file.string() + ": model_type \"" + type +
                                                   "\" is not a codec chorus knows (" + kCodecModelType + ")");
  CHORUS_ASSIGN(CodecConfig config, load_codec_config(config_file.string()));
  CHORUS_ASSIGN(io::Checkpoint ckpt, io::Checkpoint::open_dir(codec_dir, "model"));
  CHORUS_ASSIGN(Decoder decoder, Decoder::load(ckpt, config));
  return CodecModel{codec_dir, std::move(config), std::move(decoder)};
}

}  // namespace chorus::codec
