// The T5Gemma2 text encoder of Breeze TTS 2 (breeze_tts2.md §4.1) on the CPU kernels: a
// bidirectional Gemma-3-style stack (sandwich norms stored zero-centred and used as 1 + w, q/k
// norms before RoPE, per-layer-type RoPE, tanh-GELU MLP), applied to one text segment at a time
// (positions restart at 0 for each segment), then projected to the backbone width.
//
// Attention is non-causal. Full layers see every key; sliding layers use a symmetric window: key j
// is visible from query i iff 0 <= i - j < (W + 1) / 2 or 0 < j - i < W / 2 + 1, W =
// sliding_window (i sees [i - 255, i + 256] for W = 512).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/breeze_tts/config.h"

namespace chorus::io {
class Checkpoint;
}

namespace chorus::breeze_tts {

// How activations are rounded. kF32 keeps everything in f32 (exactness tests against the goldens,
// which are an f32 run). kBF16 rounds to bf16 wherever upstream's bf16 model stores a tensor (after
// each linear layer, norm, RoPE, attention product, activation and residual add), and uses the
// bf16-rounded embedding scale (34.0 instead of 33.94 for the real width).
enum class Activations { kF32, kBF16 };

// sqrt(hidden) as the embedding multiplier: f32, or rounded to bf16 as a bf16 model stores it.
float text_embed_scale(int64_t hidden, Activations act);

// Whether the encoder's attention lets query i see key j (positions within one segment).
bool text_key_visible(int64_t i, int64_t j, TextLayerType type, int64_t sliding_window);
// The RoPE frequencies of a layer type ([head_dim / 2], f32 as PyTorch computes them).
std::vector<float> text_rope_inv_freq(const TextEncoderConfig& c, TextLayerType type);

// Intermediate values for tests: the scaled embeddings and each layer's output.
struct TextEncoderTrace {
  Tensor embeddings;                // [L, H]
  std::vector<Tensor> layer_outputs;  // [layers] x [L, H], before the final norm
};

class TextEncoder {
 public:
  // Binds the encoder's weights (checked against declare_text_encoder_weights first).
  static Result<TextEncoder> create(const Config& c, const io::Checkpoint& ckpt, Activations act = Activations::kF32);

  // One segment of ids -> the encoder output after its final norm, [L, text hidden]. Ids outside
  // the text vocabulary and segments longer than max_positions are errors.
  Result<Tensor> encode(std::span<const int32_t> ids, ThreadPool* pool = nullptr,
                        TextEncoderTrace* trace = nullptr) const;
  // encode() followed by text_encoder_proj: the prompt's text rows, [L, backbone hidden].
  Result<Tensor> encode_projected(std::span<const int32_t> ids, ThreadPool* pool = nullptr) const;
  // The projection alone, on an encoder output [L, text hidden].
  Tensor project(const Tensor& encoded, ThreadPool* pool = nullptr) const;

  float embed_scale() const { return embed_scale_; }
  const TextEncoderConfig& config() const { return cfg_; }

 private:
  struct Layer {
    TextLayerType type = TextLayerType::kSliding;
    std::vector<float> inv_freq;
    Tensor q, k, v, o, gate, up, down;               // weights as stored
    std::vector<float> pre_attn, post_attn, pre_ff, post_ff, q_norm, k_norm;  // 1 + w, f32
  };

  void run_layer(const Layer& l, float* x, int64_t L, ThreadPool* pool) const;
  void attention(const Layer& l, const float* q, const float* k, const float* v, int64_t L, float* out,
                 ThreadPool* pool) const;
  void round_act(float* x, int64_t n) const;

  TextEncoderConfig cfg_;
  int64_t vocab_ = 0, out_hidden_ = 0;
  Activations act_ = Activations::kF32;
  float embed_scale_ = 1.0f;
  Tensor embed_, proj_;
  std::vector<float> eoi_row_;  // empty when the config has no eoi id
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
};

}  // namespace chorus::breeze_tts
