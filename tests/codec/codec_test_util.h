// Helpers for the codec tests: golden tensors, the tiny reference codec, random codecs of any
// shape, stage-output collection and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/codec/codec_config.h"
#include "models/codec/decoder.h"

namespace chorus::codec::test {

// A golden file's tensor as f32 or int32 values (fails the test when absent).
std::vector<float> golden_f32(const io::SafetensorsFile& f, const std::string& name, Shape* shape = nullptr);
std::vector<int32_t> golden_i32(const io::SafetensorsFile& f, const std::string& name, Shape* shape = nullptr);
io::SafetensorsFile open_golden(const std::string& rel);  // under shared/reference/

// The tiny reference codec (shared/reference/qwen3_tts/models/tiny_custom_voice/speech_tokenizer).
std::string tiny_codec_dir();

// A random-weight codec written to a scratch folder (f32), loaded.
struct RandomCodec {
  std::string dir;
  CodecConfig config;
  io::Checkpoint ckpt;
};
RandomCodec make_random_codec(const CodecConfig& config, uint64_t seed, const std::string& name);
// 8 transformer layers like the real decoder, small widths (fast on two cores).
CodecConfig small_eight_layer_config();

std::vector<int32_t> random_codes(int64_t frames, int64_t num_quantizers, int64_t codebook_size, uint32_t seed);

// Collects tapped stage outputs of a stream into whole [channels, steps] tensors.
struct StageCollector {
  struct Stage {
    int64_t channels = 0;
    std::vector<std::vector<float>> rows;  // per channel
  };
  std::map<std::string, Stage> stages;
  StageTap tap();
  // [channels, steps] row-major.
  std::vector<float> get(const std::string& name, int64_t* channels = nullptr, int64_t* steps = nullptr) const;
};

struct Diff {
  double max_abs = 0, max_ref = 0, rms_ref = 0;
  int64_t argmax = -1;
};
Diff compare(const std::vector<float>& got, const std::vector<float>& want);

// Bitwise equality (NaN-safe); reports the first difference.
::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace chorus::codec::test
