// Internal: the decoder's stages (immutable weights) and one stream's caches.
#pragma once

#include <vector>

#include "models/codec/codec_config.h"
#include "models/codec/conv_layers.h"
#include "models/codec/decoder_transformer.h"
#include "models/codec/rvq.h"
#include "models/codec/upsample.h"
#include "models/codec/vocoder.h"

namespace chorus::codec::detail {

struct DecoderModel {
  CodecConfig config;
  Dequantizer rvq;
  CausalConv1d pre_conv;
  DecoderTransformer transformer;
  std::vector<UpsampleStage> upsample;
  Vocoder vocoder;
};

struct StreamCaches {
  int64_t block_frames = 0;
  Buffer pre_conv_hist;
  TransformerCache transformer;
  std::vector<UpsampleState> upsample;
  VocoderState vocoder;
  // Activations of one step (kept for their capacity).
  Buffer x, y, tmp, upsampled;
  UpsampleScratch upsample_scratch;
  SegmentScratch pre_conv_scratch;
  VocoderScratch vocoder_scratch;
};

}  // namespace chorus::codec::detail
