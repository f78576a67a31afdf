// Compute of a Qwen3-style decoder stack (pre-norm layers with RMSNorm, QK-norm before rotary
// embeddings, grouped-query causal attention over a KV cache, SwiGLU MLP; then a final RMSNorm),
// shared by the Qwen3-TTS talker and code predictor and the Breeze TTS 2 backbone.
//
// One forward call runs several independent sequences at once: their new rows are concatenated,
// every matrix product runs over all rows together (weights are read once per call), and attention
// runs per sequence against that sequence's own cache. A row's result never depends on which other
// rows share the call (the kernels fix each output's reduction order), so batching changes nothing.
//
// Arithmetic is f32; matrices stay in their checkpoint dtype (bf16 is widened inside the kernels)
// unless the load asks for int8 / int4 weights (runtime/cpu/quant.h), quantised at load.
// Rounding::kBF16 additionally stores every activation as bf16 where a bf16 PyTorch run does (the
// input, each linear output, norm, RoPE, attention score / probability / output, SiLU, product and
// residual add; see nn/bf16_ops.h); kNone is the f32 path, unchanged by the option.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/weight_table.h"
#include "nn/kv_cache.h"
#include "nn/qwen3_block.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"

namespace chorus::nn {

struct Qwen3LayerWeights {
  cpu::LinearWeight q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj;  // [out, in]
  Tensor input_norm, post_norm, q_norm, k_norm;  // f32; q/k norms may be empty
};

// One sequence's share of a batched forward: `rows` new positions pos0, pos0+1, ... written into
// `cache` (rows at and after pos0 are replaced; pos0 may not exceed cache->length()).
struct SequenceRows {
  KvCache* cache = nullptr;
  int64_t pos0 = 0;
  int64_t rows = 0;
};

enum class Rounding { kNone, kBF16 };

// Observes the residual stream of a forward call: tap(l, h, rows) after decoder layer l (h
// [rows, hidden], all sequences' rows), and tap(layers, out, rows) after the final norm. For
// quality measurements (docs/quantization.md); nullptr costs nothing.
using LayerTap = std::function<void(int64_t layer, const float* h, int64_t rows)>;

class Qwen3Stack {
 public:
  // `w` is prefixed to the stack ("talker.model."): layers.<i>.… and norm.weight, as declared by
  // declare_qwen3_stack (the checkpoint must have been checked against that table), with the same
  // qk_norm choice. `format` chooses how the seven projections of each layer are kept (bf16: as
  // stored); `pool` quantises them in parallel.
  static Result<Qwen3Stack> load(const Weights& w, const Qwen3Dims& dims, bool qk_norm = true,
                                 cpu::WeightFormat format = cpu::WeightFormat::kBf16, ThreadPool* pool = nullptr);

  const Qwen3Dims& dims() const { return dims_; }
  cpu::WeightFormat weight_format() const { return format_; }
  size_t projection_bytes() const;  // memory held by the layers' projections
  KvCache make_cache() const;

  // Replaces the default RoPE frequencies theta^(-2i/d) with scaled ones (Breeze's depth decoder
  // uses llama3 scaling). kInvalidArgument unless there are head_dim / 2 finite positive values.
  Status set_rope_inv_freq(std::vector<float> inv_freq);

  // x: [Σ rows, hidden], the sequences' new rows in order; out: [Σ rows, hidden] after the final
  // norm (out may equal x). Fails (before computing anything) on an inconsistent cache or position.
  Status forward(std::span<const SequenceRows> seqs, const float* x, float* out, ThreadPool* pool,
                 Rounding rounding = Rounding::kNone, const LayerTap* tap = nullptr) const;

 private:
  Qwen3Dims dims_;
  cpu::WeightFormat format_ = cpu::WeightFormat::kBf16;
  std::vector<Qwen3LayerWeights> layers_;
  Tensor final_norm_;
  std::vector<float> inv_freq_;
};

}  // namespace chorus::nn
