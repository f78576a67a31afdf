// Helpers of the GPU codec tests (codec_cuda_test.cpp, codec_batch_cuda_test.cpp): random-weight
// codecs of the real and of small sizes, random codes, and the comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/codec/codec_config.h"
#include "models/codec/codec_folder.h"
#include "models/codec/weights.h"
#include "models/random_weights.h"
#include "support/test_support.h"

namespace chorus::gpu_test {

using codec::CodecConfig;

// Audio is in [-1, 1]; the CPU and GPU sum in different orders (the GPU's GEMM vs the CPU kernels), and
// the vocoder amplifies early differences, so the bound is well above f32 rounding but far below
// what a wrong history, window or position gives (1e-2 and more).
constexpr double kMaxAbs = 5e-4;

struct Codec {
  CodecConfig config;
  io::Checkpoint ckpt;
};

// A random-weight codec with the residual branches damped and the last conv scaled down, so the
// audio is not mostly clipped (clipped samples would compare equal whatever the network did).
inline Codec random_codec(const CodecConfig& config, uint64_t seed, const std::string& name) {
  Codec c;
  c.config = config;
  auto tensors = random_weights(codec::codec_weight_table(config, false), seed, DType::kF32);
  const std::string last = "decoder.decoder." + std::to_string(config.decoder.upsample_rates.size() + 2) + ".conv.weight";
  for (auto& t : tensors) {
    const float f = t.name == last ? 0.15f : t.name.find(".conv2.conv.weight") != std::string::npos ? 0.3f : 1.0f;
    for (int64_t i = 0; f != 1.0f && i < t.tensor.numel(); ++i) t.tensor.f32()[i] *= f;
  }
  const std::string dir = test::scratch_dir("codec_cuda_" + name);
  EXPECT_TRUE(io::write_safetensors(dir + "/model.safetensors", tensors).ok());
  auto ck = io::Checkpoint::open_dir(dir, "model");
  EXPECT_TRUE(ck.ok()) << ck.error().to_string();
  if (ck.ok()) c.ckpt = std::move(ck).value();
  return c;
}

inline CodecConfig small_gqa_config() {
  CodecConfig c;
  auto& d = c.decoder;
  d.codebook_size = 64;
  d.codebook_dim = 8;
  d.latent_dim = 16;
  d.transformer = nn::qwen3_dims(16, 32, 8, 4, 2, 8, 1e-5, 10000, 8000);  // 8 layers, 4 q / 2 kv heads
  d.decoder_dim = 16;
  return c;
}

inline CodecConfig real_config() {
  CodecConfig c;  // the defaults are the real codec's widths
  c.decoder.transformer = nn::qwen3_dims(512, 1024, 8, 16, 16, 64, 1e-5, 10000, 8000);
  return c;
}

inline std::vector<int32_t> random_codes(int64_t frames, const CodecConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(c.decoder.codebook_size - 1));
  std::vector<int32_t> codes(static_cast<size_t>(frames * c.decoder.num_quantizers));
  for (auto& v : codes) v = d(rng);
  return codes;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

// The reference audio must carry signal: not all zero, mostly not clipped.
inline void expect_meaningful(const std::vector<float>& ref, const char* what) {
  double peak = 0;
  size_t clipped = 0;
  for (float v : ref) {
    peak = std::max(peak, static_cast<double>(std::abs(v)));
    clipped += std::abs(v) >= 1.0f;
  }
  EXPECT_GT(peak, 1e-3) << what << ": reference audio is (nearly) silent";
  EXPECT_LT(static_cast<double>(clipped), 0.5 * static_cast<double>(ref.size())) << what << ": mostly clipped";
  std::printf("[ codec ] %s: peak %.3f, %.1f %% clipped\n", what, peak, 100.0 * clipped / std::max<size_t>(1, ref.size()));
}

}  // namespace chorus::gpu_test
