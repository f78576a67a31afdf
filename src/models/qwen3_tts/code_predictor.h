// The Qwen3-TTS code predictor (depth decoder, spec §2.6): given the talker's hidden state z and
// codebook 0 of a frame, it predicts codebooks 1..15 one at a time. A frame runs on a fresh KV
// cache: rows [z, CE(c0)] at positions 0, 1 (head 0 → c1), then row CPE_k(c_k) at position k + 1
// (head k → c_{k+1}) for k = 1..14. Inputs are in talker space and pass through
// small_to_mtp_projection when the widths differ (1.7B); identity when equal (0.6B).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/qwen3_tts/config.h"
#include "io/weight_table.h"
#include "nn/qwen3_stack.h"
#include "sampling/sampler.h"

namespace chorus::qwen3_tts {

// One frame's depth walk for one sequence.
struct FrameWalk {
  nn::KvCache* cache = nullptr;       // the sequence's code-predictor cache (reset by the walk)
  const float* first_rows = nullptr;  // [2, input_width]: the talker hidden state z, then CE(c0)
  sampling::SamplerParams params;
  sampling::DrawAddress address;      // of codebook 0; codebook k draws at .codebook = k
  int32_t* codes = nullptr;           // [groups]: codes[1..groups−1] are written
  float* logits = nullptr;            // optional [groups−1, vocab]: raw logits of every step
};

class CodePredictor {
 public:
  // `format`: how the stack's projections are kept (nn::Qwen3Stack::load); embeddings, heads and
  // the input projection stay as stored.
  static Result<CodePredictor> load(const Weights& root, const Config& config,
                                    cpu::WeightFormat format = cpu::WeightFormat::kBf16, ThreadPool* pool = nullptr);

  int64_t vocab() const { return cfg_.vocab; }
  int64_t groups() const { return cfg_.num_code_groups; }  // codebooks per frame, incl. codebook 0
  int64_t input_width() const { return input_width_; }      // the talker's hidden size
  bool has_projection() const { return !proj_w_.empty(); }
  nn::KvCache make_cache() const { return stack_.make_cache(); }
  const nn::Qwen3Stack& stack() const { return stack_; }

  // Adds row `code` of codebook `codebook`'s embedding (1 <= codebook < groups) to out[input_width].
  Status add_code_embedding(int64_t codebook, int32_t code, float* out) const;

  // Codebooks 1..groups−1 of one frame per walk, all walks batched: a two-row prefill at positions
  // 0, 1, then one row CPE_k(c_k) per step at position k + 1, each step reading the row it wrote.
  Status walk(std::span<FrameWalk> walks, ThreadPool* pool) const;

  // x [Σ rows, input_width] → projection → stack → final norm → lm_head[heads[s]] on each sequence's
  // last row → logits[s·vocab …]. heads[s] = k predicts codebook k + 1.
  Status forward(std::span<const nn::SequenceRows> seqs, const float* x, std::span<const int64_t> heads,
                 float* logits, ThreadPool* pool, const nn::LayerTap* tap = nullptr) const;

 private:
  CodePredictorConfig cfg_;
  int64_t input_width_ = 0;
  nn::Qwen3Stack stack_;
  std::vector<Tensor> embeddings_, heads_;  // 15 each: [vocab, input_width], [vocab, hidden]
  Tensor proj_w_, proj_b_;                  // empty for the identity
};

}  // namespace chorus::qwen3_tts
