// The layer library's GPU side: a Qwen3-style decoder stack on the device (DeviceStack: bf16
// matrices, or int8 / fp8 projections quantised at load; f32 norm weights; one persistent kernel
// per decode row where it applies), its KV-cache view and activation scratch, and the helpers that
// upload weights. Every codec-LM family builds its backbone and depth decoder from it. Built only
// with CUDA (CHORUS_HAVE_CUDA).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/weight_table.h"
#include "nn/kv_pages.h"
#include "nn/qwen3_block.h"
#include "runtime/cpu/row_quant.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"
#include "runtime/cuda/ops.h"

namespace chorus::nn::gpu {

// A weight on the device: a bf16 matrix, an f32 vector, or a quantised matrix (format int8 / fp8:
// its codes, then from scales_offset its f16 scales, in one buffer; cpu::RowQuantMatrix's layout).
struct DeviceTensor {
  cuda::DeviceBuffer buf;
  int64_t rows = 0, cols = 0;
  cpu::WeightFormat format = cpu::WeightFormat::kBf16;
  size_t scales_offset = 0;
  bool empty() const { return buf.data() == nullptr; }
  bool quantized() const { return format != cpu::WeightFormat::kBf16; }
  cuda::DeviceMatrix matrix() const {
    if (!quantized()) return {buf.as<const uint16_t>(), rows, cols};
    return {nullptr, rows, cols, format, codes(), scales()};
  }
  const uint16_t* bf16() const { return buf.as<const uint16_t>(); }
  const float* f32() const { return buf.as<const float>(); }
  const uint8_t* codes() const { return quantized() ? buf.as<const uint8_t>() : nullptr; }
  const uint16_t* scales() const {
    return quantized() ? reinterpret_cast<const uint16_t*>(buf.as<const uint8_t>() + scales_offset) : nullptr;
  }
};

// Any float tensor (rank 1 or 2) → bf16 matrix on the device; rank-1 f32 vectors stay f32.
Result<DeviceTensor> upload_matrix(const Tensor& t);
Result<DeviceTensor> upload_vector_f32(const Tensor& t);
// A quantised matrix (cols a multiple of 16, as cuda::linear needs) → the device.
Result<DeviceTensor> upload_quantized(const cpu::RowQuantMatrix& q);
// The tensor `name` of `w`, as above; kNotFound when it is missing.
Result<DeviceTensor> load_matrix(const Weights& w, const std::string& name);
Result<DeviceTensor> load_vector_f32(const Weights& w, const std::string& name);
// load_matrix, or with int8 / fp8 the matrix quantised on the host (cpu::quantize_rows; `pool`
// runs it) and uploaded as such.
Result<DeviceTensor> load_matrix(const Weights& w, const std::string& name, cpu::WeightFormat format,
                                 ThreadPool* pool);

// A stack's KV cache for `seqs` sequences of `capacity` positions (width = kv_heads·head_dim).
// Contiguous (pages null): per layer, keys then values, each [seqs, capacity, width] f32 at base.
// Paged (nn/kv_pages.h; capacity a multiple of kKvPagePositions): position p of sequence s lies in
// the page at device address pages[s·(capacity >> kKvPageShift) + (p >> kKvPageShift)]; a page
// holds, per layer, keys then values, each [kKvPagePositions, width] f32 (page_floats in all).
struct KvCacheRef {
  float* base = nullptr;
  int64_t seqs = 0, capacity = 0, width = 0;
  float* const* pages = nullptr;
  // Keys (or values) of one layer: of every sequence, or of one page when paged.
  int64_t layer_floats() const { return pages ? kKvPagePositions * width : seqs * capacity * width; }
  cuda::KvLayer layer(int64_t l) const {
    const int64_t per = layer_floats();
    if (pages) {
      cuda::KvLayer kv;
      kv.capacity = capacity;
      kv.pages = pages;
      kv.page_shift = kKvPageShift;
      kv.k_page = 2 * l * per;
      kv.v_page = (2 * l + 1) * per;
      return kv;
    }
    return {base + 2 * l * per, base + (2 * l + 1) * per, capacity * width, capacity};
  }
  static int64_t floats(int64_t layers, int64_t seqs, int64_t capacity, int64_t width) {
    return 2 * layers * seqs * capacity * width;
  }
  static int64_t page_floats(int64_t layers, int64_t width) { return 2 * layers * kKvPagePositions * width; }
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
  static Result<StackScratch> create(const Qwen3Dims& d, int64_t max_rows, bool fused_mlp = false);
  size_t bytes() const { return qkv.bytes() + q.bytes() + attn.bytes() + mlp.bytes() + mlp_partial.bytes(); }
};

// How a stack runs, chosen by the model that owns it.
struct StackOptions {
  // Decode steps of one row (two at hidden 1024: guidance's branches) run each layer's MLP as one
  // launch (cuda::fused_mlp) where its shape allows.
  // Costs a transposed copy of every down projection. For stacks that do not fit the persistent
  // kernel (Breeze's, where it measured faster than two launches per MLP). bf16 stacks only (the
  // one-launch MLP reads bf16 matrices).
  bool one_launch_mlp = false;
  // The seven projections of every layer: bf16 as stored, or int8 / fp8 quantised at load
  // (cpu::quantize_rows, run on `pool`); norms stay f32. int4 is kUnsupported.
  cpu::WeightFormat weights = cpu::WeightFormat::kBf16;
  ThreadPool* pool = nullptr;
};

class DeviceStack {
 public:
  // `w` is prefixed like Qwen3Stack::load's argument ("talker.model."). Layers without q/k
  // norm weights skip the QK-norm; `inv_freq` ([head_dim / 2], e.g. llama3-scaled) replaces the
  // default frequencies of dims.rope_theta when given.
  static Result<DeviceStack> load(const Weights& w, const Qwen3Dims& d, std::span<const float> inv_freq = {},
                                  StackOptions options = {});

  const Qwen3Dims& dims() const { return dims_; }
  // Whether decode rows run each MLP as one launch (StackOptions::one_launch_mlp, where it applies).
  bool fused_mlp() const { return !layers_.empty() && !layers_.front().down_t.empty(); }
  int64_t kv_width() const { return dims_.kv_heads * dims_.head_dim; }
  int64_t max_linear_k() const;       // widest matrix input
  int64_t max_linear_n_total() const; // most output features of one launch
  // How the projections are stored (StackOptions::weights), and the most elements of one of them
  // when quantised (LinearWorkspace::create's max_dequant; 0 for bf16).
  cpu::WeightFormat weights() const { return weights_; }
  int64_t max_dequant() const;
  size_t bytes() const { return bytes_; }
  size_t projection_bytes() const { return projection_bytes_; }  // the seven projections of every layer

  // h [rows, hidden]: the rows' input, used as the residual stream (overwritten); out: the final
  // norm of each row, or null to leave it to the caller (a linear that norms its input with
  // final_norm(), one kernel less per step). New keys and values go into `kv` at (rows.seq,
  // rows.pos). bf16: the bf16-activation mode of Qwen3Stack (Rounding::kBF16; the input rows
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
  Qwen3Dims dims_;
  cpu::WeightFormat weights_ = cpu::WeightFormat::kBf16;
  std::vector<Layer> layers_;
  cuda::DeviceBuffer layer_table_;  // [layers] cuda::StackLayerWeights
  DeviceTensor final_norm_, inv_freq_;
  size_t bytes_ = 0, projection_bytes_ = 0;
};

// Every row of `table` ([rows, cols] bf16) through `proj` ([out, cols], + bias when given): [out_rows,
// out] f32, rows past table.rows zero. Each row as a single-row step would form it (the
// matrix-vector kernels' per-feature order does not depend on the row count), so a step can copy
// the projected row instead of running the product. Synchronises; for load time.
Result<cuda::DeviceBuffer> project_rows(const cuda::DeviceMatrix& table, const cuda::DeviceMatrix& proj,
                                        const float* bias, int64_t out_rows);

}  // namespace chorus::nn::gpu

#endif  // CHORUS_HAVE_CUDA
