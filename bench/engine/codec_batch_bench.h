// `chorus bench --device cuda --codec-streams 1,8,32,64,128`: the GPU codec alone, decoding one new
// frame of each of S streams per step as a serving scheduler does, one decode() per stream versus
// one decode_batch() for all; per step time, per stream-frame time, the streams it keeps real time
// (a frame is 80 ms of audio), memory per stream and of the batch workspace, and whether both give
// the same samples. With several precisions each is timed, and the samples of each are compared
// with the first's (signal-to-difference ratio). Declared in every build; without CUDA it returns
// kUnsupported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/codec/codec_config.h"

namespace chorus::bench {

struct CodecBatchBenchOptions {
  std::string model;                 // a codec folder or a model folder with its codec
  std::vector<int64_t> streams;      // stream counts to time
  int64_t frames = 16;               // timed steps (one frame per stream each)
  int64_t warmup = 3;                // untimed steps first
  std::vector<codec::CodecPrecision> precisions{codec::CodecPrecision::kF32};
  // Time the batched pass only (no stream-by-stream pass to compare with): kernel traces of the
  // serving step, and less device time at large stream counts.
  bool batched_only = false;
};

Result<std::string> codec_batch_bench(const CodecBatchBenchOptions& o);

}  // namespace chorus::bench
