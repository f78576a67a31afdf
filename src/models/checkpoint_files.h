// The weight files every codec-language-model checkpoint folder has: the main model
// (model.safetensors or shards) and the speech codec in a subfolder, each checked against its
// weight table before any model object is built. Each family's ModelFiles extends this.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/weight_table.h"
#include "models/codec/codec_config.h"

namespace chorus {

struct CheckedCheckpoints {
  io::Checkpoint main;
  io::Checkpoint codec;
  bool codec_has_encoder = false;            // encoder weights present (needed for voice cloning)
  std::vector<std::string> unexpected_main;  // tensors no stage reads (reported by inspect)
  std::vector<std::string> unexpected_codec;
  int64_t main_params = 0, codec_params = 0;
};

// `dir` must already be resolved (io::resolve_model_dir). The codec's encoder tensors are checked
// only when the config declares an encoder and the file has its first tensor.
Result<CheckedCheckpoints> open_checked_checkpoints(const std::string& dir, const WeightTable& main_table,
                                                    const std::string& codec_subdir,
                                                    const codec::CodecConfig& codec_config);

// A family's ModelFiles (a CheckedCheckpoints with `dir` and `config`): the folder `spec` resolved,
// its config read by `load_config(dir)` and the weights checked against `table(config)`.
template <class Files, class LoadConfig, class Table>
Result<Files> open_checkpoint_folder(const std::string& spec, const std::string& codec_subdir, LoadConfig&& load_config,
                                     Table&& table) {
  CHORUS_ASSIGN(std::string dir, io::resolve_model_dir(spec));
  Files m;
  m.dir = dir;
  CHORUS_ASSIGN(m.config, load_config(dir));
  CHORUS_ASSIGN(static_cast<CheckedCheckpoints&>(m),
                open_checked_checkpoints(dir, table(m.config), codec_subdir, m.config.codec));
  return m;
}

// A random checkpoint folder of a family (make-tiny): config.json, generation_config.json, the
// family's tokenizer files, model.safetensors (bf16, the table's tensors) and the codec in
// `codec_subdir`.
struct RandomCheckpoint {
  std::string codec_subdir;
  nlohmann::json config, generation;
  WeightTable table;
  codec::CodecConfig codec;
  std::function<Status(const std::string& dir)> write_tokenizer;
};
Status write_random_checkpoint(const std::string& dir, const RandomCheckpoint& r, uint64_t seed);

// The same for a family's Config (its config_to_json and generation_to_json found by ADL).
template <class Config>
Status write_random_folder(const std::string& dir, const std::string& codec_subdir, const Config& c, WeightTable table,
                           std::function<Status(const std::string& dir)> write_tokenizer, uint64_t seed) {
  return write_random_checkpoint(dir,
                                 {.codec_subdir = codec_subdir,
                                  .config = config_to_json(c),
                                  .generation = generation_to_json(c.generation),
                                  .table = std::move(table),
                                  .codec = c.codec,
                                  .write_tokenizer = std::move(write_tokenizer)},
                                 seed);
}

}  // namespace chorus
