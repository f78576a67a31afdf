#include "models/breeze_tts/presets.h"

#include "models/codec/codec_config.h"

namespace chorus::breeze_tts {

Result<Dims> dims_from_name(const std::string& name) {
  if (name == "tiny") return Dims::kTiny;
  if (name == "real") return Dims::kReal;
  return make_error(ErrorCode::kInvalidArgument, "--dims must be tiny or real for breeze-tts (got \"" + name + "\")");
}

Config preset_config(Dims dims) {
  const bool tiny = dims == Dims::kTiny;
  Config c;
  c.num_codebooks = 16;
  c.audio_vocab = 2051;
  c.codec_codebook_size = 2048;
  c.backbone.dims = tiny ? nn::qwen3_dims(64, 128, 2, 4, 2, 16, 1e-6, 1e6, 40960) : nn::qwen3_dims(2048, 6144, 28, 16, 8, 128, 1e-6, 1e6, 40960);
  c.hidden = c.audio_embed = c.backbone.dims.hidden;
  auto& d = c.depth;
  d.dims = tiny ? nn::qwen3_dims(48, 96, 2, 4, 1, 12, 1e-5, 5e5, 33) : nn::qwen3_dims(1024, 8192, 12, 8, 2, 128, 1e-5, 5e5, 33);
  d.rope_scaling = {true, 32.0, 1.0 / 512.0, 1.0 / 128.0, 16};  // the real values in both
  d.vocab = c.audio_vocab;
  d.num_codebooks = c.num_codebooks;
  d.backbone_hidden = d.audio_embed = c.hidden;

  auto& t = c.text_encoder;
  t.rope_sliding = {10000.0, 1.0};
  t.rope_full = {1e6, 8.0};
  t.rms_eps = 1e-6;
  t.max_positions = 131072;
  auto& ids = c.ids;
  if (tiny) {
    // query_pre_attn_scalar differs from head_dim on purpose; the window is small so that short
    // prompts exercise it.
    t.hidden = 72, t.intermediate = 144, t.layers = 2, t.heads = 4, t.kv_heads = 1, t.head_dim = 24;
    t.query_pre_attn_scalar = 32, t.sliding_window = 8;
    t.layer_types = {TextLayerType::kSliding, TextLayerType::kFull};
    t.eoi_token_id = 480;
    c.text_vocab = 512;
    ids.audio = 498, ids.audio_eos = 499, ids.ins_bos = 510, ids.ins_eos = 511;
    for (int i = 0; i < 10; ++i) ids.speakers.push_back(500 + i);
  } else {
    t.hidden = 1152, t.intermediate = 6912, t.layers = 26, t.heads = 4, t.kv_heads = 1, t.head_dim = 256;
    t.query_pre_attn_scalar = 256, t.sliding_window = 512;
    for (int64_t i = 0; i < t.layers; ++i)
      t.layer_types.push_back((i + 1) % 6 == 0 ? TextLayerType::kFull : TextLayerType::kSliding);
    t.eoi_token_id = 256000;
    c.text_vocab = 262158;
    ids.audio = 262144, ids.audio_eos = 262145, ids.ins_bos = 262156, ids.ins_eos = 262157;
    for (int i = 0; i < 10; ++i) ids.speakers.push_back(262146 + i);
  }
  ids.pad = 0, ids.eos = 1, ids.bos = 2;
  ids.codebook_pad = 2050, ids.codebook_eos = 0;
  // The same 12 Hz codec as Qwen3-TTS (tiny: a copy of the Qwen3-TTS tiny Base speech tokenizer).
  c.codec = codec::preset_12hz(tiny);
  c.sample_rate = c.codec.sample_rate;
  return c;
}

}  // namespace chorus::breeze_tts
