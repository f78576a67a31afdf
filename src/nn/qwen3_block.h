// Dimensions of a Qwen3-style decoder stack (RMSNorm, QK-norm, RoPE, GQA, SwiGLU). The talker and
// code predictor of Qwen3-TTS, the Breeze TTS 2 backbone and depth decoder all use this block.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace chorus {
class ConfigReader;
}

namespace chorus::nn {

struct Qwen3Dims {
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  double rms_eps = 1e-6;
  double rope_theta = 1e6;
  int64_t max_positions = 32768;
};

// Dims from positional values (presets and tests).
Qwen3Dims qwen3_dims(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, int64_t kv_heads,
                     int64_t head_dim, double rms_eps, double rope_theta, int64_t max_positions);

// Reads hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, rms_norm_eps, rope_theta, max_position_embeddings, with bounds
// and consistency checks (heads divisible by kv heads, even head_dim).
Result<Qwen3Dims> read_qwen3_dims(const ConfigReader& r);

}  // namespace chorus::nn
