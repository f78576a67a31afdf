#include "models/checkpoint_files.h"

#include <filesystem>

#include "models/codec/weights.h"

namespace chorus {

Result<CheckedCheckpoints> open_checked_checkpoints(const std::string& dir, const WeightTable& main_table,
                                                    const std::string& codec_subdir,
                                                    const codec::CodecConfig& codec_config) {
  CheckedCheckpoints c;
  CHORUS_ASSIGN(c.main, io::Checkpoint::open_dir(dir, "model"));
  CHORUS_TRY(main_table.check(c.main, c.main.label(), &c.unexpected_main));
  c.main_params = static_cast<int64_t>(c.main.total_params());
  const std::string codec_dir = (std::filesystem::path(dir) / codec_subdir).string();
  CHORUS_ASSIGN(c.codec, io::Checkpoint::open_dir(codec_dir, "model"));
  c.codec_has_encoder = codec_config.encoder.present && c.codec.find("encoder.downsample.conv.weight") != nullptr;
  const WeightTable codec_table = codec::codec_weight_table(codec_config, c.codec_has_encoder);
  CHORUS_TRY(codec_table.check(c.codec, c.codec.label(), &c.unexpected_codec));
  c.codec_params = static_cast<int64_t>(c.codec.total_params());
  return c;
}

}  // namespace chorus
