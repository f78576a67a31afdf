// The convolution building blocks of the codec decoder, in streaming form: every layer is causal,
// so it keeps the few past input columns it still needs ("history") and turns n new input columns
// into exactly n·stride new output columns. Feeding a sequence in any split gives bitwise the
// output of one pass over the whole sequence: each output element is computed from the same inputs
// in the same order by the CPU kernels, whatever columns surround it.
//
// Data is channels-first [C, T] (as nn.Conv1d), f32. Weights are views of the checkpoint (f32,
// bf16 or f16); small per-channel vectors are f32 copies.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "io/weight_table.h"
#include "runtime/cpu/kernels.h"

namespace chorus::codec::detail {

using Buffer = std::vector<float>;

// Several streams' columns packed side by side in one [C, N] buffer: stream i owns columns
// [at[i], at[i] + n[i]) of every channel row, N = total. A batched layer computes each stream's
// columns from the same inputs in the same order as the stream alone would, so a stream's output
// does not depend on its batch.
struct Segments {
  std::vector<int64_t> n, at;
  int64_t total = 0;
  static Segments of(std::span<const int64_t> counts);
  Segments scaled(int64_t rate) const;  // every count × rate (a stage that upsamples)
  size_t size() const { return n.size(); }
};

// Buffers of the batched layers, kept by their owner so that their capacity is reused.
struct SegmentScratch {
  Buffer window, in, out, pad, pad_out;
};

// A weight as a [rows, cols] matrix for the kernels; `keep` holds the checkpoint memory.
struct WeightMatrix {
  Tensor keep;
  cpu::MatrixRef ref;
  static WeightMatrix of(const Tensor& t, int64_t rows, int64_t cols);
};

// f32 copy of a small tensor (biases, norm weights, scales); empty when absent.
std::vector<float> f32_vector(const Weights& w, const std::string& name);

// Causal Conv1d (left zero padding (K−1)·dilation, stride 1): `name`.weight [Cout, Cin/g, K] and
// optionally `name`.bias.
struct CausalConv1d {
  WeightMatrix weight;
  std::vector<float> bias;
  int64_t cin = 0, cout = 0, kernel = 1, dilation = 1, groups = 1;

  static CausalConv1d load(const Weights& w, const std::string& name, int64_t cin, int64_t cout,
                           int64_t kernel, int64_t dilation = 1, int64_t groups = 1);
  int64_t history() const { return (kernel - 1) * dilation; }
  Buffer initial_history() const { return Buffer(static_cast<size_t>(cin * history()), 0.0f); }
  // x [cin, n] -> y [cout, n]; hist [cin, history()] holds the previous inputs (zeros at start).
  void forward(Buffer& hist, const float* x, int64_t n, float* y, Buffer& scratch,
               ThreadPool* pool) const;
  // x [cin, N] -> y [cout, N] for the streams of `seg`, hists[i] stream i's history. Few columns
  // per stream: their shifted input rows are gathered side by side and one product serves them
  // all (the weights read once); many: stream by stream.
  void forward_batch(std::span<Buffer* const> hists, const float* x, const Segments& seg, float* y,
                     Buffer& scratch, SegmentScratch& more, ThreadPool* pool) const;
};

// Past input columns of a transposed convolution (at most `frames` of them, fewer at the start).
struct TransposeHistory {
  Buffer cols;       // [cin, frames]
  int64_t have = 0;  // how many of them exist
};

// Causal ConvTranspose1d (kernel K >= stride s, the last K − s samples of a full pass trimmed):
// `name`.weight [Cin, Cout, K], `name`.bias. Output sample t·s + j is final once input t exists.
struct CausalConvTranspose1d {
  WeightMatrix weight;
  std::vector<float> bias;
  int64_t cin = 0, cout = 0, kernel = 1, stride = 1;

  static CausalConvTranspose1d load(const Weights& w, const std::string& name, int64_t cin,
                                    int64_t cout, int64_t kernel, int64_t stride);
  // Earlier inputs an output sample can depend on: ⌊(K−1)/s⌋.
  int64_t lookback() const { return (kernel - 1) / stride; }
  TransposeHistory initial_history() const;
  // x [cin, n] -> y [cout, n·stride].
  void forward(TransposeHistory& hist, const float* x, int64_t n, float* y, Buffer& scratch_in,
               Buffer& scratch_out, ThreadPool* pool) const;
  // x [cin, N] -> y [cout, N·stride] for the streams of `seg`: one pass over every stream's
  // [history | new] columns side by side when each history is full, else stream by stream.
  void forward_batch(std::span<TransposeHistory* const> hists, const float* x, const Segments& seg, float* y,
                     Buffer& scratch_in, Buffer& scratch_out, SegmentScratch& more, ThreadPool* pool) const;
};

// SnakeBeta: y = x + 1/(exp(β) + 1e-9) · sin²(exp(α) · x), per channel (α, β stored as logs).
struct SnakeBeta {
  std::vector<float> alpha;     // exp(α)
  std::vector<float> inv_beta;  // 1 / (exp(β) + 1e-9)

  // `name`.alpha, `name`.beta of length channels.
  static SnakeBeta load(const Weights& w, const std::string& name);
  // x, y [channels, n]; y may alias x.
  void apply(const float* x, int64_t n, float* y, ThreadPool* pool) const;
};

// out[c, t] = in[t, c] for in [rows = T, cols = C] (and the reverse, with the roles swapped).
void transpose(const float* in, int64_t rows, int64_t cols, float* out);

}  // namespace chorus::codec::detail
