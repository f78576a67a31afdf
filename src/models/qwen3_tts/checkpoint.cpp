#include "models/qwen3_tts/checkpoint.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "io/json_util.h"
#include "io/model_dir.h"
#include "models/codec/weights.h"
#include "models/qwen3_tts/weights.h"
#include "models/random_weights.h"
#include "text/byte_level_vocab.h"

namespace chorus::qwen3_tts {

namespace fs = std::filesystem;

Result<ModelFiles> open_model_files(const std::string& spec) {
  CHORUS_ASSIGN(std::string dir, io::resolve_model_dir(spec));
  ModelFiles m;
  m.dir = dir;
  CHORUS_ASSIGN(m.config, load_config(dir));
  CHORUS_ASSIGN(static_cast<CheckedCheckpoints&>(m),
                open_checked_checkpoints(dir, main_weight_table(m.config), "speech_tokenizer", m.config.codec));
  return m;
}

namespace {

Status write_tokenizer(const fs::path& dir, const Config& c) {
  // Merged words the prompt templates need as single tokens ("assistant", "user"), as in Qwen2.
  text::ByteLevelVocabSpec spec;
  spec.words = {"assistant", "user"};
  spec.special_tokens = {{c.im_start_id, "<|im_start|>"}, {c.im_end_id, "<|im_end|>"},
                         {c.tts_pad_id, "<|tts_pad|>"},   {c.tts_bos_id, "<|tts_text_bos|>"},
                         {c.tts_eos_id, "<|tts_text_eod|>"}};
  return text::write_byte_level_vocab(dir.string(), spec);
}

}  // namespace

Status write_random_model(const std::string& dir_str, const Config& c, uint64_t seed) {
  const fs::path dir(dir_str);
  std::error_code ec;
  fs::create_directories(dir / "speech_tokenizer", ec);
  if (ec) return make_error(ErrorCode::kIo, dir_str + ": cannot create: " + ec.message());
  CHORUS_TRY(io::write_json_file((dir / "config.json").string(), config_to_json(c)));
  CHORUS_TRY(io::write_json_file((dir / "generation_config.json").string(), generation_to_json(c.generation)));
  CHORUS_TRY(write_tokenizer(dir, c));
  ThreadPool& pool = ThreadPool::global();
  {
    auto tensors = random_weights(main_weight_table(c), seed, DType::kBF16, &pool);
    CHORUS_TRY(io::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}}));
  }
  return codec::write_random_codec((dir / "speech_tokenizer").string(), c.codec, seed);
}

}  // namespace chorus::qwen3_tts
