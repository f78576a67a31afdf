// CUDA kernels of the inference backend: the device counterparts of runtime/cpu/kernels.h that the
// Qwen3 stacks need, plus the sampler. Activations are f32 and row-major on the device; matrices
// are bf16 on the device (converted once at load), or, for a stack's projections, int8 / fp8
// codes with f16 group scales (runtime/cpu/row_quant.h) where the model was loaded so. Every launch
// is asynchronous on the given stream and returns a Status for launch errors; nothing synchronises
// with the host, so all of these can be captured into a CUDA graph.
//
// Numerics follow the CPU kernels (same formulas, f32 arithmetic, f64 where the CPU uses f64:
// RMS-norm sums, softmax denominators, sampler weights); only summation orders differ.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "runtime/cpu/weight_format.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda {

// A [rows, cols] matrix on the device, row-major: rows = output features. bf16 (bit patterns in
// `data`), or quantised (format kInt8 / kFp8, the layout of runtime/cpu/row_quant.h): one code
// byte per weight in `codes` [rows, cols] and f16 scales [rows, ⌈cols / 32⌉] in `scales`, the
// weight being decode(code) · scale of its group of 32 columns. Only `linear` takes quantised
// matrices (the stacks' projections); every other op reads bf16.
struct DeviceMatrix {
  const uint16_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  cpu::WeightFormat format = cpu::WeightFormat::kBf16;
  const uint8_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  bool quantized() const { return format != cpu::WeightFormat::kBf16; }
};

// Whether p may be read as 16-byte vectors (float4, the matrix-vector kernels' weight chunks).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- linear: y = norm?(x) · Wᵀ + b -------------------------------------------------------------

enum class Epilogue : uint8_t {
  kStore,   // y = x·Wᵀ + b
  kAdd,     // y += x·Wᵀ + b (residual connection)
  kSwiGlu,  // out[0] is the gate, out[1] the up projection (same shape): out[0].y = silu(g)·u
};

struct LinearOut {
  DeviceMatrix w;
  const float* bias = nullptr;  // [w.rows] or null
  float* y = nullptr;           // row m of the result at y + m·ldy
  int64_t ldy = 0;
};

// A range of device memory to pull into L2 ahead of its use (LinearArgs::prefetch).
struct L2Prefetch {
  const void* ptr = nullptr;
  size_t bytes = 0;
};

// Up to three matrices that read the same input (q, k and v; gate and up) in one launch.
struct LinearArgs {
  const float* x = nullptr;  // row m at x + m·ldx, K = out[0].w.cols floats
  int64_t ldx = 0;
  int64_t M = 0;
  const float* norm_weight = nullptr;  // when set, each x row is RMS-normed first (as cpu::rms_norm)
  float norm_eps = 1e-6f;
  LinearOut out[3];
  int outputs = 1;
  Epilogue epilogue = Epilogue::kStore;
  // bf16-activation mode (nn::Rounding::kBF16): the normed input is HF Qwen3RMSNorm under bf16,
  // bf16(w · bf16(x · rsqrt(mean x² + eps))); each output is rounded to bf16, kAdd rounds the sum
  // again, kSwiGlu gives bf16(bf16(silu(bf16 g)) · bf16 u). false: the f32 path, unchanged.
  bool bf16 = false;
  // With bf16, false leaves the stored products in f32 while the normed input is still rounded as
  // the bf16 mode rounds it: a head over a bf16 stack's final norm whose logits are read in f32
  // (the final norm fused into the head's launch). kStore only.
  bool round_outputs = true;
  // Weights of a later launch that this one's blocks ask L2 to fetch (cp.async.bulk.prefetch) before
  // they wait for their inputs, so a latency-bound launch that follows (a layer's q/k/v and o, ~5 MB)
  // reads them from L2. No effect on results; matrix-vector path only. Measured on the H200 (Breeze):
  // the next layer's attention weights help; prefetching the MLP's 34-50 MB is slower (it does not
  // stay in L2 until used).
  L2Prefetch prefetch[4];
};

// Scratch for the tensor-core path: the inputs split into bf16 high and low parts (x ≈ hi + lo to
// about 2⁻¹⁷ relative, so the product keeps f32-level accuracy; three parts for 3 to 8 rows, to f32
// precision) and partial results; with max_dequant (the most elements of any quantised matrix the
// path takes), room for one matrix dequantised into bf16 high and low parts the same way. Sized
// once; a call that needs more fails instead of allocating (graph capture).
//
// every_row_tensor: linear calls with this workspace take the row-invariant tensor-core kernel at
// every row count (bf16 matrices), and the stacks using it skip their one-row and two-row kernels
// (persistent stack, fused MLP), so a row's results never depend on how many rows share a step
// (LoadOptions::batch_invariant). Slower: see docs/cuda.md.
class LinearWorkspace {
 public:
  static Result<LinearWorkspace> create(int64_t max_rows, int64_t max_k, int64_t max_n_total, int64_t max_dequant = 0,
                                        bool every_row_tensor = false);
  int64_t max_rows() const { return max_rows_; }
  bool every_row_tensor() const { return every_row_tensor_; }
  size_t bytes() const { return x_split_.bytes() + y_split_.bytes() + cublas_ws_.bytes() + w_split_.bytes(); }

 private:
  friend Status linear(const LinearArgs&, LinearWorkspace*, cudaStream_t, int);
  Cublas cublas_;
  DeviceBuffer x_split_, y_split_, cublas_ws_, w_split_;
  int64_t max_rows_ = 0, max_k_ = 0, max_n_ = 0, max_dequant_ = 0;
  bool every_row_tensor_ = false;
};

// Path choice: matrix-vector kernels read the weights at full bandwidth and keep f32 inputs, and are
// used for fewer than kTensorMinRows rows, and up to kGemvMaxRows rows of quantised matrices or
// without a workspace; bf16 matrices with rows a multiple of 8 long take linear_tensor.cu's kernel
// from kTensorMinRows to kGemvMaxRows rows, with the inputs split into three bf16 parts (as
// accurate as the matrix-vector kernels, and no longer paying for each row again); more rows go to
// bf16 tensor cores with two-part inputs on cuBLAS. A workspace with every_row_tensor sends every
// row count of such matrices to linear_tensor.cu's kernel instead (two-part inputs), whose results
// for a row do not depend on M or the other rows.
// Quantised matrices (every output of one call in the same format, cols a multiple of 16, inputs
// 16-byte aligned with ldx a multiple of 4): the matrix-vector kernels dequantise in registers
// (linear_quant.cu: code · scale in f32, then the same f32 products); the tensor-core path
// dequantises each matrix into the workspace as bf16 high and low parts (w ≈ hi + lo to about 2⁻¹⁶
// relative) and adds the low part's product, so both paths compute with the quantised weights
// themselves.
inline constexpr int64_t kGemvMaxRows = 8;
inline constexpr int64_t kTensorMinRows = 3;
inline constexpr int kLinearAuto = 0, kLinearGemv = 1, kLinearTensor = 2;
Status linear(const LinearArgs& a, LinearWorkspace* ws, cudaStream_t s, int path = kLinearAuto);

// ---- a decode step's MLP in one launch (mlp.cu) ------------------------------------------------
// h += down(SwiGLU(gate · n, up · n)) with n = RMSNorm(h; norm_weight), for one row (or two:
// guidance's branches, read with each weight once). Each warp takes whole intermediate features:
// their gate and up rows (summed exactly as `linear` sums them, so the activations are
// bit-identical to the two-launch path) and down's column for the same feature, read from a
// transposed copy of down where it is contiguous. So the three matrices stream from memory in one
// launch instead of two (the second launch of the pair waits on the first's tail).
// The down sum runs in another order than `linear`'s (per block, then over blocks, deterministic):
// results agree with the two-launch path to float rounding, not bit for bit. One row at hidden 1024
// streams the weights through shared memory with bulk copies instead of register loads (faster
// there; its own down order), see set_fused_mlp_bulk.
struct FusedMlpArgs {
  float* h = nullptr;                  // [rows, hidden]: the inputs and the residual stream (updated)
  int rows = 1;                        // 1, or 2 (guidance's two branches) up to fused_mlp_max_rows
  const float* norm_weight = nullptr;  // [hidden] (post-attention norm)
  float norm_eps = 1e-6f;
  DeviceMatrix gate, up;  // [intermediate, hidden]
  DeviceMatrix down_t;    // [intermediate, hidden]: down_proj ([hidden, intermediate]) transposed
  float* partial = nullptr;  // scratch of fused_mlp_partial_floats(hidden, rows) floats
  bool bf16 = false;         // as LinearArgs::bf16 (the same roundings as the two-launch path)
  L2Prefetch prefetch[4];    // as LinearArgs::prefetch, asked for by the first launch
};
// Rows the one-launch MLP runs at once for this shape: 2 at hidden 1024, 1 at 2048, else 0.
int fused_mlp_max_rows(int64_t hidden, int64_t intermediate);
bool fused_mlp_supported(int64_t hidden, int64_t intermediate, int rows = 1);
size_t fused_mlp_partial_floats(int64_t hidden, int rows = 1);
Status fused_mlp(const FusedMlpArgs& a, cudaStream_t s);
// Off: single rows at hidden 1024 take the register kernel too, whose rows are bit-identical to its
// two-row launches. On by default; tests turn it off to compare the two kernels.
void set_fused_mlp_bulk(bool on);
// dst [cols, rows] = src [rows, cols] transposed (bf16 bit patterns; load time, not captured).
Status transpose_matrix(const DeviceMatrix& src, uint16_t* dst, cudaStream_t s);

// ---- row-wise and element-wise -----------------------------------------------------------------

// bf16: nn::bf16::rms_norm (f32 mean/sqrt/division of the f64 sum, two bf16 roundings).
Status rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps, cudaStream_t s,
                bool bf16 = false);
// x[i] = bf16(x[i]) (round to nearest even), in place.
Status round_bf16(float* x, int64_t n, cudaStream_t s);
Status silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
// out[i, :] = table[ids[i], :] (f32); ids outside the table give a zero row. ids are on the device.
Status embedding(const DeviceMatrix& table, const int32_t* ids, int64_t n, float* out, cudaStream_t s);

// ---- attention over a device KV cache ----------------------------------------------------------

// Key/value rows of every sequence of one layer. Contiguous (pages null): sequence s, position p,
// kv head g at k + s·seq_stride + p·(kv_heads·head_dim) + g·head_dim (likewise v). Paged: position
// p of sequence s lies in the page at device address pages[s·(capacity >> page_shift) + (p >>
// page_shift)], its row at + k_page (keys) or + v_page (values) + (p mod 2^page_shift)·(kv_heads·
// head_dim), kv head g at + g·head_dim; k, v and seq_stride are unused. Positions < capacity (a
// multiple of the page size when paged). Paged caches take the general and the long-context
// kernels (the small-cache ones preload contiguous rows).
struct KvLayer {
  float* k = nullptr;
  float* v = nullptr;
  int64_t seq_stride = 0;
  int64_t capacity = 0;
  float* const* pages = nullptr;
  int page_shift = 0;
  int64_t k_page = 0, v_page = 0;
};

// Which sequence and absolute position each of `rows` new rows belongs to (device arrays).
struct RowMap {
  const int32_t* seq = nullptr;
  const int32_t* pos = nullptr;
  int64_t rows = 0;
  bool decode = false;  // every row is the only new row of its sequence (attention_decode applies)
};

struct HeadShape {
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
};

// For each new row: q = rope(rms_norm(q, q_norm)) → q_out [rows, q_heads·head_dim]; k likewise with
// k_norm, stored with v into the cache at (seq, pos). qkv rows are [q | k | v] with stride ld_qkv.
// Norm weights may be null (no QK-norm). bf16 (all three calls): the bf16-activation mode of
// nn/bf16_ops.h — two-step bf16 norm, rope with bf16 cos/sin and every product and sum rounded,
// scores bf16(bf16(q·k)·scale), probabilities bf16(softmax), outputs rounded; false: the f32 path.
Status qk_norm_rope_store(const float* qkv, int64_t ld_qkv, HeadShape h, const float* q_norm, const float* k_norm,
                          float eps, const float* inv_freq, RowMap rows, KvLayer kv, float* q_out, cudaStream_t s,
                          bool bf16 = false);

// Causal attention of each row's query heads against keys 0..pos of its sequence (every key must be
// in the cache already): out [rows, q_heads·head_dim]. Softmax in f32 with an f64 denominator.
Status attention(const float* q, HeadShape h, float scale, RowMap rows, KvLayer kv, float* out, cudaStream_t s,
                 bool bf16 = false);
// Decode form of the two calls above in one kernel, for rows that are each the single new row of
// their sequence (at its last position): QK-norm, rope, cache store of the new key and value, and
// attention, from the raw projections qkv. With caches of up to 32 positions it reads the earlier
// positions' keys and values before it waits for the kernel launched just before it (programmatic
// dependent launch), so that kernel must not write them (the stores of earlier steps are fine).
Status attention_decode(const float* qkv, int64_t ld_qkv, HeadShape h, const float* q_norm, const float* k_norm,
                        float eps, const float* inv_freq, float scale, RowMap rows, KvLayer kv, float* out,
                        cudaStream_t s, bool bf16 = false);
// Small caches with head_dim 64 or 128 take a kernel specialized for them, and long caches at head
// size 128 (more than 64 positions) one that splits the keys over a cluster of two blocks per query
// head; both are bit-identical to the general kernel and faster. On by default; tests turn them off
// to compare them with the general kernel.
void set_small_attention(bool on);
void set_long_attention(bool on);
// The long-cache decode attention of many rows runs W warps per (row, query head) instead of a
// cluster per head (bit-identical, faster when the rows alone fill the GPU): 4 from
// kRowAttentionRows rows; from kRowAttentionGroupRows four warps per (row, kv group), reading the
// group's keys and values once for its query heads (groups of 2 or 4; others four warps per head).
// Tests and the timing harness force a choice: 0 the cluster kernel, 1 or 4 warps per head,
// kRowAttentionGroup4 four warps per kv group;
// kRowAttentionAuto (or anything else) restores the default.
constexpr int64_t kRowAttentionRows = 32;
constexpr int64_t kRowAttentionGroupRows = 64;
constexpr int kRowAttentionGroup4 = 3;
constexpr int kRowAttentionAuto = -1;
void set_row_attention(int variant);
// Call once (outside graph capture) before attention over caches of up to `capacity` positions.
Status attention_reserve(int64_t capacity, int64_t head_dim);

// ---- sampling ----------------------------------------------------------------------------------

// One stream's sampler settings and random-number key (as sampling::SamplerParams / DrawAddress).
struct DeviceSampler {
  int32_t greedy = 0;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float repetition_penalty = 1.0f;
  uint32_t seed_lo = 0, seed_hi = 0;
  uint32_t rng_stream = 0;
};

// Error codes written to SampleArgs::error.
inline constexpr int32_t kSampleNonFinite = 1, kSampleAllMasked = 2;

// Samples one id per row exactly as sampling::sample (apply_rules then choose), with the draw at
// address (seed, rng_stream, frame[r] + frame_offset, codebook, 0). `logits` are used as scratch.
struct SampleArgs {
  float* logits = nullptr;  // [rows, ld]
  int64_t ld = 0;
  int32_t vocab = 0;
  int32_t rows = 0;
  const DeviceSampler* params = nullptr;  // [rows]
  const int32_t* frame = nullptr;         // [rows]
  int32_t frame_offset = 0;
  uint32_t codebook = 0;
  // Rules (talker): repetition penalty over flagged ids, masking of ids >= allowed_below except
  // also_allowed, and blocked_id masked while frame < block_until_frame[r] (always when null).
  const uint8_t* penalized = nullptr;  // [rows, vocab] flags, or null
  int64_t allowed_below = -1;
  int32_t also_allowed = -1;
  int32_t blocked_id = -1;
  const int32_t* block_until_frame = nullptr;
  int32_t* out = nullptr;  // id of row r at out[r·out_stride]
  int64_t out_stride = 1;
  uint8_t* mark_chosen = nullptr;  // [rows, vocab]: the chosen id's flag is set (penalty history)
  int32_t* error = nullptr;        // [rows]: kSample* on failure, untouched otherwise
  // When set: embed_out[r·embed_dim …] = embed_table row of the chosen id (f32), the next step's input;
  // embed_table_f32 instead: rows that are f32 already (precomputed products).
  const uint16_t* embed_table = nullptr;
  const float* embed_table_f32 = nullptr;
  bool embed_round_bf16 = false;  // embed_table_f32 rows rounded to bf16 on the way (bf16 mode)
  float* embed_out = nullptr;
  int64_t embed_dim = 0;
  double* scratch_w = nullptr;     // [rows, vocab]
  int32_t* scratch_ids = nullptr;  // [rows, 2·vocab]
};
Status sample(const SampleArgs& a, cudaStream_t s);

// Philox4x32-10 and uniform53 on the device, exposed for tests: out[i] = uniform53 of address
// (seed, stream, frame, codebook + i, 0).
Status uniform53_batch(uint64_t seed, uint32_t stream, uint32_t frame, uint32_t codebook0, int n, double* out,
                       cudaStream_t s);

// f32 → bf16 (round to nearest even) on the device, for uploading weights.
Status f32_to_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);

}  // namespace chorus::cuda
