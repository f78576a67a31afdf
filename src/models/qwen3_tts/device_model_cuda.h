// Qwen3-TTS weights on the GPU: the talker and code-predictor stacks (bf16 matrices, f32 norm
// weights), the codec embeddings and heads. Immutable after upload and shared by every batch of
// streams; the per-stream state (KV caches, counters) lives in FrameBatch (frame_batch_cuda.h).
// Built only with CUDA (CHORUS_HAVE_CUDA).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "models/qwen3_tts/model.h"
#include "models/weight_table.h"
#include "nn/qwen3_block.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"
#include "runtime/cuda/ops.h"

namespace chorus::qwen3_tts::gpu {

// A weight on the device: a bf16 matrix or an f32 vector.
struct DeviceTensor {
  cuda::DeviceBuffer buf;
  int64_t rows = 0, cols = 0;
  bool empty() const { return buf.data() == nullptr; }
  cuda::DeviceMatrix matrix() const { return {buf.as<const uint16_t>(), rows, cols}; }
  const uint16_t* bf16() const { return buf.as<const uint16_t>(); }
  const float* f32() const { return buf.as<const float>(); }
};

// Any float tensor (rank 1 or 2) → bf16 matrix on the device; rank-1 f32 vectors stay f32.
Result<DeviceTensor> upload_matrix(const Tensor& t);
Result<DeviceTensor> upload_vector_f32(const Tensor& t);

// A stack's KV cache for `seqs` sequences of `capacity` positions: per layer, keys then values,
// each [seqs, capacity, kv_heads·head_dim] f32.
struct KvCacheRef {
  float* base = nullptr;
  int64_t seqs = 0, capacity = 0, width = 0;
  int64_t layer_floats() const { return seqs * capacity * width; }  // keys (or values) of one layer
  cuda::KvLayer layer(int64_t l) const {
    const int64_t per = layer_floats();
    return {base + 2 * l * per, base + (2 * l + 1) * per, capacity * width, capacity};
  }
  static int64_t floats(int64_t layers, int64_t seqs, int64_t capacity, int64_t width) {
    return 2 * layers * seqs * capacity * width;
  }
};

// Activations of one stack forward over up to max_rows rows.
struct StackScratch {
  cuda::DeviceBuffer qkv, q, attn, mlp;
  cuda::DeviceBuffer mlp_partial;  // cuda::fused_mlp's partial sums (stacks that run it only)
  int mlp_rows = 0;                // rows cuda::fused_mlp may take at once with this scratch
  cuda::DeviceBuffer barrier;  // the persistent decode kernel's grid barrier (cuda::decode_stack)
  int64_t max_rows = 0;
  // fused_mlp: the stack runs cuda::fused_mlp (DeviceStack::fused_mlp()); the others get no
  // partial-sum buffer.
  static Result<StackScratch> create(const nn::Qwen3Dims& d, int64_t max_rows, bool fused_mlp = false);
  size_t bytes() const { return qkv.bytes() + q.bytes() + attn.bytes() + mlp.bytes() + mlp_partial.bytes(); }
};

// How a stack runs, chosen by the model that owns it.
struct StackOptions {
  // Decode steps of one row (two at hidden 1024: guidance's branches) run each layer's MLP as one
  // launch (cuda::fused_mlp) where its shape allows.
  // Costs a transposed copy of every down projection. For stacks that do not fit the persistent
  // kernel (Breeze's, where it measured faster than two launches per MLP).
  bool one_launch_mlp = false;
};

class DeviceStack {
 public:
  // `w` is prefixed like nn::Qwen3Stack::load's argument ("talker.model."). Layers without q/k
  // norm weights skip the QK-norm; `inv_freq` ([head_dim / 2], e.g. llama3-scaled) replaces the
  // default frequencies of dims.rope_theta when given.
  static Result<DeviceStack> load(const Weights& w, const nn::Qwen3Dims& d, std::span<const float> inv_freq = {},
                                  StackOptions options = {});

  const nn::Qwen3Dims& dims() const { return dims_; }
  // Whether decode rows run each MLP as one launch (StackOptions::one_launch_mlp, where it applies).
  bool fused_mlp() const { return !layers_.empty() && !layers_.front().down_t.empty(); }
  int64_t kv_width() const { return dims_.kv_heads * dims_.head_dim; }
  int64_t max_linear_k() const;       // widest matrix input
  int64_t max_linear_n_total() const; // most output features of one launch
  size_t bytes() const { return bytes_; }

  // h [rows, hidden]: the rows' input, used as the residual stream (overwritten); out: the final
  // norm of each row, or null to leave it to the caller (a linear that norms its input with
  // final_norm(), one kernel less per step). New keys and values go into `kv` at (rows.seq,
  // rows.pos). bf16: the bf16-activation mode of nn::Qwen3Stack (Rounding::kBF16; the input rows
  // are rounded first, the caches hold bf16 values); false: the f32 path. input_rounded (bf16
  // only): the rows are bf16 values already (a bf16 linear's or the sampler's rounded output), so
  // the rounding launch is skipped. One decode row runs as one persistent kernel
  // (cuda::decode_stack, bit-identical) where it applies.
  const float* final_norm() const { return final_norm_.f32(); }
  float norm_eps() const { return static_cast<float>(dims_.rms_eps); }
  Status forward(float* h, float* out, const cuda::RowMap& rows, const KvCacheRef& kv, StackScratch& scratch,
                 cuda::LinearWorkspace& ws, cudaStream_t s, bool bf16 = false, bool input_rounded = false) const;
  // Sets `to` (a LinearArgs::prefetch) to layer `layer`'s q, k, v and o weights, so the launch that
  // precedes the layer (or the stack) pulls them into L2; unchanged when prefetching is off or the
  // four total more than 16 MB (larger prefetches were measured slower).
  void prefetch_attention(int64_t layer, cuda::L2Prefetch (&to)[4]) const;

 private:
  struct Layer {
    DeviceTensor q, k, v, o, gate, up, down, in_norm, post_norm, q_norm, k_norm;
    DeviceTensor down_t;  // down transposed, for cuda::fused_mlp (StackOptions::one_launch_mlp)
  };
  // The single-row decode step as one persistent kernel, or false when it does not apply.
  Result<bool> forward_persistent(float* h, float* out, const cuda::RowMap& rows, const KvCacheRef& kv,
                                  StackScratch& sc, cudaStream_t s, bool bf16, bool input_rounded) const;
  nn::Qwen3Dims dims_;
  std::vector<Layer> layers_;
  cuda::DeviceBuffer layer_table_;  // [layers] cuda::StackLayerWeights
  DeviceTensor final_norm_, inv_freq_;
  size_t bytes_ = 0;
};

class DeviceModel {
 public:
  const Model& cpu() const { return *cpu_; }
  const DeviceStack& talker() const { return talker_; }
  const DeviceStack& code_predictor() const { return cp_; }
  int64_t hidden() const { return talker_.dims().hidden; }       // talker width
  int64_t cp_hidden() const { return cp_.dims().hidden; }
  int64_t vocab() const { return codec_head_.rows; }              // talker codec vocabulary
  int64_t cp_vocab() const { return cp_heads_.empty() ? 0 : cp_heads_[0].rows; }
  int groups() const { return static_cast<int>(cp_heads_.size()) + 1; }
  const DeviceTensor& codec_embedding() const { return codec_embedding_; }
  const DeviceTensor& codec_head() const { return codec_head_; }
  const DeviceTensor& cp_embedding(int k) const { return cp_embeddings_[static_cast<size_t>(k - 1)]; }  // k >= 1
  const DeviceTensor& cp_head(int k) const { return cp_heads_[static_cast<size_t>(k)]; }                // k >= 0
  bool has_projection() const { return !proj_w_.empty(); }
  const DeviceTensor& projection() const { return proj_w_; }
  const DeviceTensor& projection_bias() const { return proj_b_; }
  // With a projection: codebook k's embedding table already projected, [cp vocab, cp_hidden] f32
  // (k >= 1), so that a depth step's input needs no matrix product; null without one.
  const float* cp_projected_embedding(int k) const {
    return cp_projected_.empty() ? nullptr : cp_projected_[static_cast<size_t>(k - 1)].as<const float>();
  }
  // Device array of groups() table pointers: the codec embedding, then codebooks 1..G−1.
  const uint16_t* const* embedding_tables() const { return tables_.as<const uint16_t* const>(); }
  size_t weight_bytes() const { return bytes_; }
  int32_t eos_id() const { return eos_id_; }
  // Talker ids at or above this are masked when sampling codebook 0 (except EOS), as stream.cpp.
  int64_t allowed_below() const { return allowed_below_; }

 private:
  std::shared_ptr<const Model> keep_;
  const Model* cpu_ = nullptr;
  DeviceStack talker_, cp_;
  DeviceTensor codec_embedding_, codec_head_, proj_w_, proj_b_;
  std::vector<DeviceTensor> cp_embeddings_, cp_heads_;
  std::vector<cuda::DeviceBuffer> cp_projected_;
  cuda::DeviceBuffer tables_;
  size_t bytes_ = 0;
  int32_t eos_id_ = 0;
  int64_t allowed_below_ = 0;
  friend Result<std::shared_ptr<const DeviceModel>> upload_model(std::shared_ptr<const Model>);
  Status project_cp_embeddings();
};

// Every row of `table` ([rows, cols] bf16) through `proj` ([out, cols], + bias when given): [out_rows,
// out] f32, rows past table.rows zero. Each row as a single-row step would form it (the
// matrix-vector kernels' per-feature order does not depend on the row count), so a step can copy
// the projected row instead of running the product. Synchronises; for load time.
Result<cuda::DeviceBuffer> project_rows(const cuda::DeviceMatrix& table, const cuda::DeviceMatrix& proj,
                                        const float* bias, int64_t out_rows);

// Keeps `model` alive as long as the device copy.
Result<std::shared_ptr<const DeviceModel>> upload_model(std::shared_ptr<const Model> model);

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
