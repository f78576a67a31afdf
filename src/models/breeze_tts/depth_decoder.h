// The Breeze TTS 2 depth decoder (breeze_tts2.md §4.4): per frame, codebooks 1..15 from the
// backbone's final hidden state h and codebook 0. Every frame runs on a fresh cache of 16 positions
// (frames never see each other):
//   position 0:  W_in · h                                   (inputs_embeds_projector, no bias)
//   position p:  W_in · E[(p − 1)·V + c_{p−1}]  for p ≥ 1   (the shared audio table, codebook offsets)
// through a Llama stack (no q/k norm, llama3-scaled RoPE, final RMSNorm); codebook k is read at
// position k through head k − 1 (codebooks_head[k − 1], stored [in, out], computed in f32).
//
// Guidance and sampling stay outside: a walk hands each step's raw per-branch logits to a picker
// that returns the code (CFG combine → mask → sample happens there), and every branch (CFG
// cond / uncond, dual-CFG uncond / ref / ins) is then fed that same code, each in its own cache.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/text_encoder.h"
#include "nn/qwen3_stack.h"

namespace chorus::breeze_tts {

// One guidance branch of a frame's walk.
struct DepthBranch {
  nn::KvCache* cache = nullptr;    // this branch's depth cache (reset by the walk)
  const float* hidden = nullptr;   // [backbone hidden]: the branch's backbone output for this frame
};

// Returns codebook `codebook`'s code from the branches' raw logits, [branches, vocab] row-major.
using DepthPicker = std::function<Result<int32_t>(int64_t codebook, std::span<const float> logits)>;

// One stream's frame in a walk of many: its branches, its codes (codes[0] = c0 on entry,
// codes[1..codebooks−1] written) and the picker that turns its branches' logits into its codes.
struct DepthFrame {
  std::span<const DepthBranch> branches;
  int32_t* codes = nullptr;
  DepthPicker pick;
};

class DepthDecoder {
 public:
  // Checks the depth decoder's tensors (declare_depth_weights), then binds them.
  // `format`: how the stack's projections are kept (nn::Qwen3Stack::load); the rest stays as stored.
  static Result<DepthDecoder> load(const Config& c, const io::Checkpoint& ckpt,
                                   cpu::WeightFormat format = cpu::WeightFormat::kBf16, ThreadPool* pool = nullptr);

  int64_t vocab() const { return vocab_; }
  int64_t codebooks() const { return codebooks_; }
  nn::KvCache make_cache() const;
  const nn::Qwen3Stack& stack() const { return stack_; }

  // One frame: codes[0] = c0 on entry; codes[1..codebooks−1] are written. When `logits` is given,
  // it receives every step's raw branch logits, [codebooks − 1, branches, vocab].
  // kBF16: the projected rows and the stack's activations are stored as bf16; the heads run in f32
  // on the bf16 hidden state (upstream casts y to f32 for codebooks_head, spec §4.4).
  Status walk(std::span<const DepthBranch> branches, int32_t* codes, const DepthPicker& pick, ThreadPool* pool,
              float* logits = nullptr, Activations act = Activations::kF32) const;

  // The frames of many streams walked together: each of the codebooks − 1 steps is one stack pass
  // over every branch of every frame. A row's arithmetic does not depend on the rows beside it,
  // so each frame's codes are those of its own walk.
  Status walk(std::span<const DepthFrame> frames, ThreadPool* pool, Activations act = Activations::kF32) const;

  // The reference the cached walk must equal: one pass over [h, c0 .. c_{n−1}] on a fresh cache,
  // logits of codebooks 1..n → logits [n, vocab] (n <= codebooks − 1).
  Status recompute(const float* hidden, std::span<const int32_t> codes, float* logits, ThreadPool* pool,
                   Activations act = Activations::kF32) const;

 private:
  // W_in · h for each hidden state → out[n, depth hidden] (the frames' position-0 rows).
  void project_hiddens(std::span<const float* const> hidden, float* out, ThreadPool* pool, Activations act) const;
  // W_in · (table row of codebook `codebook`, code codes[i]) → out[i] for i < n.
  void project_codes(int64_t codebook, const int32_t* codes, int64_t n, float* out, ThreadPool* pool,
                     Activations act) const;
  // Head `head` (predicting codebook head + 1) on n final-normed rows y[n, depth hidden].
  void apply_head(const float* y, int64_t n, int64_t head, float* logits, ThreadPool* pool) const;

  int64_t vocab_ = 0, codebooks_ = 0, in_width_ = 0, hidden_ = 0;
  nn::Qwen3Stack stack_;
  Tensor table_, projector_;
  std::vector<Tensor> heads_;  // codebooks − 1 of [vocab, hidden] (transposed from [in, out])
};

}  // namespace chorus::breeze_tts
