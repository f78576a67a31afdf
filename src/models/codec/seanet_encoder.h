// The speech encoder's SEANet front end (transformers' MimiEncoder, qwen3_tts.md §4.3): waveform
// [1, N] -> [hidden, ceil(N / hop)] at 25 Hz, hop = product of the strides (960).
//
//   conv k7 (1 -> F)
//   per stride s in reversed(upsampling_ratios): residual block(s) [ELU, conv k3 (C -> C/2),
//     ELU, conv k1 (C/2 -> C), identity skip], ELU, conv k = 2s stride s (C -> 2C)
//   ELU, conv k3 (-> hidden)
//
// Every conv is Mimi's causal conv: left zero padding of k_eff − stride columns
// (k_eff = (k − 1)·dilation + 1) and, at the end of the signal only, right zero padding up to a
// whole number of strides, so a conv of stride s turns L inputs into ceil(L / s) outputs.
//
// The signal is processed in blocks (a multiple of hop samples; the last block may be shorter):
// each conv keeps its last k_eff − stride input columns as history, which makes the output the
// same as one pass over the whole signal while memory stays bounded by the block size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

// One causal (optionally strided, dilated) conv with Mimi's padding rule.
struct MimiCausalConv {
  WeightMatrix weight;
  std::vector<float> bias;  // empty: none
  int64_t cin = 0, cout = 0, kernel = 1, stride = 1, dilation = 1;

  static MimiCausalConv load(const Weights& w, const std::string& name, int64_t cin, int64_t cout,
                             int64_t kernel, int64_t stride = 1, int64_t dilation = 1);
  // Input columns of the past each output needs: k_eff − stride.
  int64_t history() const { return (kernel - 1) * dilation + 1 - stride; }
  // Outputs for n inputs: n / stride, or ceil(n / stride) for the last block of a signal.
  int64_t outputs(int64_t n, bool last) const { return last ? (n + stride - 1) / stride : n / stride; }
  // x [cin, n] -> y [cout, outputs(n, last)]; hist [cin, history()] (zeros at the start). Unless
  // `last`, n must be a multiple of stride.
  void forward(std::vector<float>& hist, const float* x, int64_t n, bool last, float* y,
               std::vector<float>& scratch, ThreadPool* pool) const;
};

struct SeanetState {
  std::vector<std::vector<float>> hist;  // one per conv, in order
  std::vector<float> a, b, c, scratch;   // activations of one block (kept for their capacity)
};

class SeanetEncoder {
 public:
  static SeanetEncoder load(const Weights& w, const EncoderConfig& e);

  int64_t hop() const { return hop_; }  // input samples per output column
  int64_t out_channels() const { return out_channels_; }
  SeanetState new_state() const;
  // Samples [n] (a multiple of hop() unless `last`) -> appends out_channels() × outputs columns to
  // `out`, time-major ([t][c]), so blocks concatenate.
  void forward(SeanetState& s, const float* samples, int64_t n, bool last, std::vector<float>& out,
               ThreadPool* pool) const;

 private:
  struct Stage {
    std::vector<std::pair<MimiCausalConv, MimiCausalConv>> residual;  // (k3 C -> C/2, k1 C/2 -> C)
    MimiCausalConv down;
  };
  MimiCausalConv first_, last_;
  std::vector<Stage> stages_;
  int64_t hop_ = 1, out_channels_ = 0;
};

}  // namespace chorus::codec::detail
