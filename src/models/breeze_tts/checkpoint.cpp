#include "models/breeze_tts/checkpoint.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "io/model_dir.h"
#include "models/breeze_tts/tokenizer.h"
#include "models/breeze_tts/weights.h"
#include "models/codec/weights.h"
#include "models/random_weights.h"

namespace chorus::breeze_tts {

namespace fs = std::filesystem;

Result<ModelFiles> open_model_files(const std::string& spec) {
  CHORUS_ASSIGN(std::string dir, io::resolve_model_dir(spec));
  ModelFiles m;
  m.dir = dir;
  CHORUS_ASSIGN(m.config, load_config(dir));
  CHORUS_ASSIGN(static_cast<CheckedCheckpoints&>(m),
                open_checked_checkpoints(dir, main_weight_table(m.config), "audio_tokenizer", m.config.codec));
  const fs::path tok = fs::path(m.dir) / kTokenizerFile;
  if (fs::is_regular_file(tok)) m.tokenizer_path = tok.string();
  return m;
}

namespace {

// The tensors make-tiny writes: the required ones (the dead text table is left out, and the tied
// backbone audio table is omitted as in the release).
WeightTable written_table(const Config& c) {
  WeightTable all = main_weight_table(c), out;
  for (const auto& s : all.specs())
    if (!s.optional) out.add(s.name, s.shape, s.init, s.dtypes);
  return out;
}

}  // namespace

Status write_random_model(const std::string& dir_str, const Config& c, uint64_t seed) {
  const fs::path dir(dir_str);
  std::error_code ec;
  fs::create_directories(dir / "audio_tokenizer", ec);
  if (ec) return make_error(ErrorCode::kIo, dir_str + ": cannot create: " + ec.message());
  CHORUS_TRY(io::write_json_file((dir / "config.json").string(), config_to_json(c)));
  CHORUS_TRY(io::write_json_file((dir / "generation_config.json").string(), generation_to_json(c.generation)));
  CHORUS_ASSIGN(const std::string tokenizer, train_tiny_tokenizer(c));
  CHORUS_TRY(io::write_file((dir / kTokenizerFile).string(), tokenizer));
  ThreadPool& pool = ThreadPool::global();
  {
    auto tensors = random_weights(written_table(c), seed, DType::kBF16, &pool);
    CHORUS_TRY(io::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}}));
  }
  return codec::write_random_codec((dir / "audio_tokenizer").string(), c.codec, seed);
}

}  // namespace chorus::breeze_tts
