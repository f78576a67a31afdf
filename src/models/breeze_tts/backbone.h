// The Breeze TTS 2 backbone (breeze_tts2.md §4.3): the shared Qwen3 stack over prompt rows and
// generated-frame rows, and lm_head (audio ids + the EOS class). Its input is rows only (no token
// table): text rows from the encoder, frame rows from the shared audio table. Immutable after load;
// per-sequence state (one per CFG branch) is the KV cache the caller owns.
#pragma once

#include <cstdint>
#include <span>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/text_encoder.h"
#include "nn/qwen3_stack.h"

namespace chorus::breeze_tts {

class Backbone {
 public:
  // Checks the backbone's tensors (declare_backbone_weights), then binds them.
  // `format`: how the stack's projections are kept (nn::Qwen3Stack::load); the head stays as stored.
  static Result<Backbone> load(const Config& c, const io::Checkpoint& ckpt,
                               cpu::WeightFormat format = cpu::WeightFormat::kBf16, ThreadPool* pool = nullptr);

  int64_t hidden() const { return stack_.dims().hidden; }
  int64_t classes() const { return lm_head_.dim(0); }  // audio vocab + 1 (EOS)
  nn::KvCache make_cache() const { return stack_.make_cache(); }
  const nn::Qwen3Stack& stack() const { return stack_; }

  // Every sequence's new rows x [Σ rows, hidden] through the stack; the final-normed hidden state
  // of all rows → hidden_out [Σ rows, hidden] (when given), and for each sequence s the lm_head
  // logits of its last row → logits[s·classes …]. That last hidden state is what the depth decoder
  // starts from.
  // kBF16: the stack stores bf16 activations (nn::Rounding::kBF16); lm_head runs in f32 on the
  // bf16 hidden state, as upstream casts its input with .float() (spec §5.6).
  Status forward(std::span<const nn::SequenceRows> seqs, const float* x, float* hidden_out, float* logits,
                 ThreadPool* pool, Activations act = Activations::kF32) const;

 private:
  nn::Qwen3Stack stack_;
  Tensor lm_head_;
};

}  // namespace chorus::breeze_tts
