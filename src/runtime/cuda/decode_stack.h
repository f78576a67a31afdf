// A whole Qwen3 decoder stack for one new row in one persistent kernel (the single-stream decode
// step of the talker, the code predictor, the Breeze backbone and depth decoder).
//
// Why: one stream's decode step is ~5 dependent launches per layer, each moving only 2–30 MB, so
// the launch and drain latency between kernels (~5 µs each) costs more than reading the weights.
// Here one block per SM stays resident for all layers; the phases (qkv, attention, o, gate/up,
// down) are separated by grid barriers, and each warp loads its first weight chunks of the next
// phase before it waits at the barrier, so the weight stream runs on across phase boundaries.
//
// Numerics: bit-identical to the kernel-by-kernel path (cuda::linear's single-row kernel and the
// fused decode attention): the same per-feature summation order, the same RMS sums, the same
// attention warp split. The final norm is not included (cuda::rms_norm after it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::cuda {

// One decoder layer's weights on the device: bf16 matrices [out, in], f32 norm vectors; q_norm and
// k_norm may be null (no QK-norm). No biases (Qwen3 and the Breeze depth decoder have none).
// A quantised stack (DecodeStackArgs::weights int8 / fp8) gives each matrix's codes and scales
// instead (cuda::DeviceMatrix), in the order q, k, v, o, gate, up, down; its bf16 pointers are null.
struct StackLayerWeights {
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const uint16_t *gate = nullptr, *up = nullptr, *down = nullptr;
  const float *in_norm = nullptr, *post_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  const uint8_t* codes[7] = {};
  const uint16_t* scales[7] = {};
};

struct DecodeStackArgs {
  const StackLayerWeights* layers = nullptr;  // device array [n_layers]
  int n_layers = 0;
  int hidden = 0, q_heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  float eps = 1e-6f, scale = 1.0f;
  const float* inv_freq = nullptr;  // [head_dim / 2]
  // Layer l's keys at kv_base + 2l·kv_layer_floats, values at kv_base + (2l+1)·kv_layer_floats;
  // sequence s, position p at + s·kv_seq_stride + p·kv_heads·head_dim. Paged (kv_pages set; ops.h
  // KvLayer): position p of sequence s in the page kv_pages[s·(kv_capacity >> kv_page_shift) + (p >>
  // kv_page_shift)], layer l's keys at + 2l·kv_layer_floats (one layer's keys in a page), values
  // kv_layer_floats later, the row at + (p mod 2^kv_page_shift)·kv_heads·head_dim; kv_base and
  // kv_seq_stride unused.
  float* kv_base = nullptr;
  int64_t kv_layer_floats = 0, kv_seq_stride = 0, kv_capacity = 0;
  float* const* kv_pages = nullptr;
  int kv_page_shift = 0;
  const int32_t* seq = nullptr;  // device: the row's sequence
  const int32_t* pos = nullptr;  // device: its position (the new key and value are stored there)
  float* h = nullptr;            // [hidden]: the input row, left as the residual stream
  float* qkv = nullptr;          // scratch [q_heads·D + 2·kv_heads·D]
  float* attn = nullptr;         // scratch [q_heads·D]
  float* mlp = nullptr;          // scratch [intermediate]
  unsigned* barrier = nullptr;   // 2 zeroed words per concurrently running stack (left reusable)
  bool bf16 = false;             // bf16-activation mode, as cuda::linear / attention_decode
  // How the layers' matrices are stored: bf16, or int8 / fp8 codes dequantised as cuda::linear's
  // quantised kernels do, in the same per-feature order (bit-identical to them).
  cpu::WeightFormat weights = cpu::WeightFormat::kBf16;
  // Diagnostics (decode_stack_enable_trace; set by decode_stack): per phase and block, %globaltimer
  // at the phase's start, after its input is staged and when the block arrives at the next barrier.
  unsigned long long* trace = nullptr;
};

// Once per process, outside graph capture (sets the kernel's shared-memory limit); false when the
// GPU cannot run it (then decode_stack always answers kUnsupported).
bool decode_stack_reserve();
// Whether decode_stack runs this shape and KV capacity (dimensions multiples of 256, head_dim ≤
// 256, the block's weight rows and scratch in shared memory) and the path is enabled.
bool decode_stack_applies(const DecodeStackArgs& a);
Status decode_stack(const DecodeStackArgs& a, cudaStream_t s);
// Turns the persistent path on or off for this process (on by default). Tests turn it off to compare
// it with the kernel-by-kernel path.
void decode_stack_set_enabled(bool on);
// Launches enqueued so far (tests check that the persistent path really ran).
uint64_t decode_stack_launches();
// Diagnostics for `chorus bench --stack-trace`: every launch stamps its phases' times. Call before
// the first decode_stack_reserve (before a model is loaded); it costs a few stores per phase.
void decode_stack_enable_trace();
// With the trace on: where the last traced launch of each stack depth spent its time, per phase
// kind (grid barrier, input staging, matrix work), as text; empty otherwise. Synchronises.
std::string decode_stack_trace_report();

}  // namespace chorus::cuda
