// The weight files every codec-language-model checkpoint folder has: the main model
// (model.safetensors or shards) and the speech codec in a subfolder, each checked against its
// weight table before any model object is built. Each family's ModelFiles extends this.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/codec/codec_config.h"
#include "models/weight_table.h"

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

}  // namespace chorus
