#include "models/breeze_tts/checkpoint.h"

#include <filesystem>

#include "io/file_util.h"
#include "io/json_util.h"
#include "io/model_dir.h"
#include "models/breeze_tts/tokenizer.h"
#include "models/breeze_tts/weights.h"
#include "models/checkpoint_files.h"

namespace chorus::breeze_tts {

namespace fs = std::filesystem;

Result<ModelFiles> open_model_files(const std::string& spec) {
  CHORUS_ASSIGN(ModelFiles m, open_checkpoint_folder<ModelFiles>(spec, "audio_tokenizer", load_config, main_weight_table));
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

Status write_random_model(const std::string& dir, const Config& c, uint64_t seed) {
  const auto tokenizer = [&c](const std::string& d) -> Status {
    CHORUS_ASSIGN(const std::string model, train_tiny_tokenizer(c));
    return io::write_file((fs::path(d) / kTokenizerFile).string(), model);
  };
  return write_random_folder(dir, "audio_tokenizer", c, written_table(c), tokenizer, seed);
}

}  // namespace chorus::breeze_tts
