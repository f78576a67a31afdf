// The vocoder half of the decoder (qwen3_tts.md §4.1 steps 5–7): causal conv k7 into decoder_dim
// channels, one block per upsample rate r (SnakeBeta, causal transposed conv k = 2r stride r, three
// residual units with dilations 1, 3, 9), SnakeBeta, causal conv k7 to one channel, clamp to [−1, 1].
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"

namespace chorus::codec::detail {

struct VocoderState {
  Buffer conv_in_hist;
  struct Block {
    TransposeHistory up;
    std::array<Buffer, 3> unit_hist;
  };
  std::vector<Block> blocks;
  Buffer conv_out_hist;
};

struct VocoderScratch {
  Buffer a, b, c, pad, pad2;
  SegmentScratch segments;
};

// Called with each stage's output [channels, steps] (channels-first) when set; for tests/debugging.
using StageTap = std::function<void(const std::string& stage, const float* data, int64_t channels,
                                    int64_t steps)>;

class Vocoder {
 public:
  static Vocoder load(const Weights& w, const DecoderConfig& d);

  VocoderState new_state() const;
  int64_t upsampling() const;  // output samples per input step
  // x [latent, n] -> wav [n · upsampling()] appended to `out`.
  void forward(VocoderState& s, const float* x, int64_t n, std::vector<float>& out,
               VocoderScratch& sc, ThreadPool* pool, const StageTap* tap) const;
  // The same for the streams of `seg` (x [latent, N], conv_layers.h's Segments): stream i's
  // samples are appended to *outs[i]. `tap` only with one stream.
  void forward_batch(std::span<VocoderState* const> states, const float* x, const Segments& seg,
                     std::span<std::vector<float>* const> outs, VocoderScratch& sc, ThreadPool* pool,
                     const StageTap* tap) const;

 private:
  struct ResidualUnit {
    SnakeBeta act1, act2;
    CausalConv1d conv1, conv2;
  };
  struct Block {
    SnakeBeta act;
    CausalConvTranspose1d up;
    std::array<ResidualUnit, 3> units;
  };

  CausalConv1d conv_in_, conv_out_;
  std::vector<Block> blocks_;
  SnakeBeta act_out_;
};

}  // namespace chorus::codec::detail
