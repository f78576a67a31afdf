#include "io/config_reader.h"
#include "nn/qwen3_block.h"

namespace chorus::nn {

Qwen3Dims qwen3_dims(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, int64_t kv_heads,
                     int64_t head_dim, double rms_eps, double rope_theta, int64_t max_positions) {
  Qwen3Dims d;
  d.hidden = hidden;
  d.intermediate = intermediate;
  d.layers = layers;
  d.heads = heads;
  d.kv_heads = kv_heads;
  d.head_dim = head_dim;
  d.rms_eps = rms_eps;
  d.rope_theta = rope_theta;
  d.max_positions = max_positions;
  return d;
}

Result<Qwen3Dims> read_qwen3_dims(const ConfigReader& r) {
  Qwen3Dims d;
  CHORUS_ASSIGN(d.hidden, r.i64("hidden_size", 1, 65536));
  CHORUS_ASSIGN(d.intermediate, r.i64("intermediate_size", 1, 262144));
  CHORUS_ASSIGN(d.layers, r.i64("num_hidden_layers", 1, 512));
  CHORUS_ASSIGN(d.heads, r.i64("num_attention_heads", 1, 1024));
  CHORUS_ASSIGN(d.kv_heads, r.i64("num_key_value_heads", 1, 1024, d.heads));
  CHORUS_ASSIGN(d.head_dim, r.i64("head_dim", 2, 1024, d.hidden / d.heads));
  CHORUS_ASSIGN(d.rms_eps, r.f64("rms_norm_eps", 1e-12, 1e-1, 1e-6));
  CHORUS_ASSIGN(d.rope_theta, r.f64("rope_theta", 1.0, 1e12, 1e6));
  CHORUS_ASSIGN(d.max_positions, r.i64("max_position_embeddings", 1, 1 << 24, 32768));
  if (d.heads % d.kv_heads != 0)
    return make_error(ErrorCode::kInvalidFormat, r.path() + ": num_attention_heads (" + std::to_string(d.heads) +
                                                     ") is not a multiple of num_key_value_heads (" +
                                                     std::to_string(d.kv_heads) + ")");
  if (d.head_dim % 2 != 0)
    return make_error(ErrorCode::kInvalidFormat, r.path() + ".head_dim must be even for rotary embeddings");
  return d;
}

}  // namespace chorus::nn
