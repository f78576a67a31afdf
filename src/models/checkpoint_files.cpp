#include "models/checkpoint_files.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "io/json_util.h"
#include "models/codec/weights.h"
#include "models/random_weights.h"

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

Status write_random_checkpoint(const std::string& dir_str, const RandomCheckpoint& r, uint64_t seed) {
  const std::filesystem::path dir(dir_str);
  std::error_code ec;
  std::filesystem::create_directories(dir / r.codec_subdir, ec);
  if (ec) return make_error(ErrorCode::kIo, dir_str + ": cannot create: " + ec.message());
  CHORUS_TRY(io::write_json_file((dir / "config.json").string(), r.config));
  CHORUS_TRY(io::write_json_file((dir / "generation_config.json").string(), r.generation));
  if (r.write_tokenizer) CHORUS_TRY(r.write_tokenizer(dir.string()));
  ThreadPool& pool = ThreadPool::global();
  {
    auto tensors = random_weights(r.table, seed, DType::kBF16, &pool);
    CHORUS_TRY(io::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}}));
  }
  return codec::write_random_codec((dir / r.codec_subdir).string(), r.codec, seed);
}

}  // namespace chorus
