// A family's Config read from a checkpoint folder: config.json (required), generation_config.json
// (optional) and the codec's config.json in its subfolder (required), in that order, so that the
// first error a bad folder gives is the same for every family.
#pragma once

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/config_reader.h"
#include "models/codec/codec_config.h"

namespace chorus {

// parse_main(json, path) → Result<Config>; parse_generation(json, path, Config&) → Status.
// `family` names the checkpoint in the error for a folder without config.json; `codec_file` gets the
// codec config's path (for the caller's own checks of the codec against the config).
template <class Config, class ParseMain, class ParseGeneration>
Result<Config> load_config_folder(const std::string& dir, const std::string& family, const std::string& codec_subdir,
                                  ParseMain&& parse_main, ParseGeneration&& parse_generation, std::string& codec_file) {
  namespace fs = std::filesystem;
  const std::string main = (fs::path(dir) / "config.json").string();
  if (!fs::exists(main))
    return make_error(ErrorCode::kNotFound, dir + ": no config.json (is this a " + family + " checkpoint folder?)");
  CHORUS_ASSIGN(auto root, ConfigReader::parse_file(main));
  CHORUS_ASSIGN(Config c, parse_main(root, main));
  const std::string gen = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen)) {
    CHORUS_ASSIGN(auto groot, ConfigReader::parse_file(gen));
    CHORUS_TRY(parse_generation(groot, gen, c));
  }
  codec_file = (fs::path(dir) / codec_subdir / "config.json").string();
  if (!fs::exists(codec_file))
    return make_error(ErrorCode::kNotFound, dir + ": no " + codec_subdir + "/config.json (the codec is required)");
  CHORUS_ASSIGN(c.codec, codec::load_codec_config(codec_file));
  return c;
}

}  // namespace chorus
