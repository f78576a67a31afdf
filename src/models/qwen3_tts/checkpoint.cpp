#include "models/qwen3_tts/checkpoint.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "io/json_util.h"
#include "models/codec/weights.h"
#include "models/qwen3_tts/weights.h"
#include "models/random_weights.h"
#include "text/byte_level_vocab.h"

namespace chorus::qwen3_tts {

namespace fs = std::filesystem;

Result<ModelFiles> open_model_files(const std::string& dir) {
  if (!fs::is_directory(dir)) return make_error(ErrorCode::kNotFound, dir + ": not a directory");
  ModelFiles m;
  m.dir = dir;
  CHORUS_ASSIGN(m.config, load_config(dir));
  CHORUS_ASSIGN(m.main, io::Checkpoint::open_dir(dir, "model"));
  const WeightTable main_table = main_weight_table(m.config);
  CHORUS_TRY(main_table.check(m.main, (fs::path(dir) / "model.safetensors").string(), &m.unexpected_main));
  m.main_params = static_cast<int64_t>(m.main.total_params());
  const std::string codec_dir = (fs::path(dir) / "speech_tokenizer").string();
  CHORUS_ASSIGN(m.codec, io::Checkpoint::open_dir(codec_dir, "model"));
  m.codec_has_encoder = m.config.codec.encoder.present && m.codec.find("encoder.downsample.conv.weight") != nullptr;
  const WeightTable codec_table = codec::codec_weight_table(m.config.codec, m.codec_has_encoder);
  CHORUS_TRY(codec_table.check(m.codec, (fs::path(codec_dir) / "model.safetensors").string(), &m.unexpected_codec));
  m.codec_params = static_cast<int64_t>(m.codec.total_params());
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
