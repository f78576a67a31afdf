#include "models/qwen3_tts/checkpoint.h"

#include <filesystem>

#include "io/json_util.h"
#include "io/model_dir.h"
#include "models/checkpoint_files.h"
#include "models/qwen3_tts/weights.h"
#include "text/byte_level_vocab.h"

namespace chorus::qwen3_tts {

namespace fs = std::filesystem;

Result<ModelFiles> open_model_files(const std::string& spec) {
  return open_checkpoint_folder<ModelFiles>(spec, "speech_tokenizer", load_config, main_weight_table);
}

namespace {

Status write_tokenizer(const std::string& dir, const Config& c) {
  // Merged words the prompt templates need as single tokens ("assistant", "user"), as in Qwen2.
  text::ByteLevelVocabSpec spec;
  spec.words = {"assistant", "user"};
  spec.special_tokens = {{c.im_start_id, "<|im_start|>"}, {c.im_end_id, "<|im_end|>"},
                         {c.tts_pad_id, "<|tts_pad|>"},   {c.tts_bos_id, "<|tts_text_bos|>"},
                         {c.tts_eos_id, "<|tts_text_eod|>"}};
  return text::write_byte_level_vocab(dir, spec);
}

}  // namespace

Status write_random_model(const std::string& dir, const Config& c, uint64_t seed) {
  const auto tokenizer = [&c](const std::string& d) { return write_tokenizer(d, c); };
  return write_random_folder(dir, "speech_tokenizer", c, main_weight_table(c), tokenizer, seed);
}

}  // namespace chorus::qwen3_tts
