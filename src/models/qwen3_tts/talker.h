// The Qwen3-TTS talker: text embedding + projection MLP, codec embedding, the Qwen3 decoder stack
// and the codec head (spec §2.3–2.5). Immutable after load; per-sequence state is the KV cache the
// caller owns.
#pragma once

#include <cstdint>
#include <span>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/qwen3_tts/config.h"
#include "io/weight_table.h"
#include "nn/qwen3_stack.h"

namespace chorus::qwen3_tts {

class Talker {
 public:
  // `root` addresses the whole checkpoint (names start with "talker."). `format` chooses how the
  // stack's projections are kept (nn::Qwen3Stack::load); embeddings and the codec head stay as stored.
  static Result<Talker> load(const Weights& root, const Config& config,
                             cpu::WeightFormat format = cpu::WeightFormat::kBf16, ThreadPool* pool = nullptr);

  int64_t hidden() const { return stack_.dims().hidden; }
  int64_t vocab() const { return cfg_.codec_vocab; }
  const TalkerConfig& config() const { return cfg_; }
  const nn::Qwen3Stack& stack() const { return stack_; }
  nn::KvCache make_cache() const { return stack_.make_cache(); }
  const Tensor& codec_head() const { return codec_head_; }  // [vocab, hidden]

  // TextEmb(id) = fc2(silu(fc1(text_embedding[id]))) for every id: out [ids.size(), hidden].
  Status embed_text(std::span<const int32_t> ids, float* out, ThreadPool* pool) const;
  // Rows of the codec embedding: out [ids.size(), hidden].
  Status embed_codec(std::span<const int32_t> ids, float* out) const;
  // Adds codec-embedding row `id` to out[hidden].
  void add_codec_row(int32_t id, float* out) const;

  // The stack over every sequence's new rows x [Σ rows, hidden]; for each sequence s, the final
  // hidden state of its last row → last_hidden[s·hidden …] and the codec-head logits of that row →
  // logits[s·vocab …].
  Status forward(std::span<const nn::SequenceRows> seqs, const float* x, float* last_hidden, float* logits,
                 ThreadPool* pool, const nn::LayerTap* tap = nullptr) const;

 private:
  TalkerConfig cfg_;
  nn::Qwen3Stack stack_;
  Tensor codec_embedding_, text_embedding_, codec_head_;
  Tensor fc1_w_, fc1_b_, fc2_w_, fc2_b_;  // text projection (biases f32)
};

}  // namespace chorus::qwen3_tts
