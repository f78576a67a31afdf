#include "models/qwen3_tts/presets.h"

namespace chorus::qwen3_tts {

Result<Dims> dims_from_name(const std::string& name) {
  if (name == "tiny") return Dims::kTiny;
  if (name == "real-0.6b") return Dims::kReal06B;
  if (name == "real-1.7b") return Dims::kReal17B;
  return make_error(ErrorCode::kInvalidArgument, "--dims must be tiny, real-0.6b or real-1.7b (got \"" + name + "\")");
}

Config preset_config(Variant variant, Dims dims) {
  Config c;
  c.variant = variant;
  const bool tiny = dims == Dims::kTiny;
  auto& t = c.talker;
  auto& cp = c.code_predictor;
  if (tiny) {
    // The reference tiny models: text ids remapped into a 1024-token vocabulary.
    c.size_label = "1b7";
    t.dims = nn::qwen3_dims(32, 64, 2, 4, 2, 16, 1e-6, 1e6, 32768);
    t.text_vocab = 1024;
    t.text_hidden = 48;
    c.im_start_id = 1000;
    c.im_end_id = 1001;
    c.tts_pad_id = 1010;
    c.tts_bos_id = 1011;
    c.tts_eos_id = 1012;
    const int64_t cp_hidden = variant == Variant::kCustomVoice ? 32 : 24;  // both projection cases
    cp.dims = nn::qwen3_dims(cp_hidden, 48, 2, 4, 2, 16, 1e-6, 1e6, 65536);
  } else {
    const bool big = dims == Dims::kReal17B;
    c.size_label = big ? "1b7" : "0b6";
    t.dims = big ? nn::qwen3_dims(2048, 6144, 28, 16, 8, 128, 1e-6, 1e6, 32768) : nn::qwen3_dims(1024, 3072, 28, 16, 8, 128, 1e-6, 1e6, 32768);
    cp.dims = nn::qwen3_dims(1024, 3072, 5, 16, 8, 128, 1e-6, 1e6, 65536);
  }
  t.language_ids = {{"chinese", 2055}, {"english", 2050},    {"german", 2053},  {"italian", 2070},
                    {"portuguese", 2071}, {"spanish", 2054}, {"japanese", 2058}, {"korean", 2064},
                    {"french", 2061},  {"russian", 2069}};
  if (variant == Variant::kCustomVoice) {
    t.language_ids["beijing_dialect"] = 2074;
    t.language_ids["sichuan_dialect"] = 2062;
    t.speaker_ids = {{"serena", 3066}, {"vivian", 3065}, {"uncle_fu", 3010}, {"ryan", 3061}, {"aiden", 2861},
                     {"ono_anna", 2873}, {"sohee", 2864}, {"eric", 2875},   {"dylan", 2878}};
    t.speaker_dialect = {{"eric", "sichuan_dialect"}, {"dylan", "beijing_dialect"}};
  }
  if (variant == Variant::kBase) {
    SpeakerEncoderConfig s;
    if (tiny) {
      s.enc_dim = t.dims.hidden;
      const int64_t ch[5] = {32, 32, 32, 32, 96};
      for (int i = 0; i < 5; ++i) s.channels[i] = ch[i];
      s.attention_channels = 16;
      s.se_channels = 16;
    } else {
      s.enc_dim = t.dims.hidden;
    }
    c.speaker_encoder = s;
  }
  c.generation.max_new_tokens = 8192;  // the released generation_config.json
  c.codec = codec::preset_12hz(tiny);
  return c;
}

}  // namespace chorus::qwen3_tts
