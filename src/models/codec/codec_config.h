// Configuration of the 12.5 Hz speech codec ("Qwen3-TTS-Tokenizer-12Hz"), shared by Qwen3-TTS
// (speech_tokenizer/) and Breeze TTS 2 (audio_tokenizer/). See qwen3_tts.md §1.7.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/qwen3_block.h"

namespace chorus::codec {

struct DecoderConfig {
  int64_t codebook_size = 2048;
  int64_t codebook_dim = 512;  // RVQ in/out width; each codebook vector is codebook_dim / 2 wide
  int64_t num_quantizers = 16;
  int64_t num_semantic_quantizers = 1;
  int64_t latent_dim = 1024;
  nn::Qwen3Dims transformer;  // hidden 512, 8 layers, 16 heads x 64, eps 1e-5, theta 1e4
  int64_t sliding_window = 72;
  int64_t decoder_dim = 1536;
  std::vector<int64_t> upsampling_ratios{2, 2};    // ConvNeXt stage ratios (12.5 -> 50 Hz)
  std::vector<int64_t> upsample_rates{8, 5, 4, 3};  // vocoder blocks (50 Hz -> 24 kHz)
};

struct EncoderConfig {
  bool present = false;  // false when the folder has no encoder section
  int64_t num_filters = 64;
  int64_t kernel_size = 7, last_kernel_size = 3, residual_kernel_size = 3;
  int64_t num_residual_layers = 1;
  int64_t dilation_growth_rate = 2;
  int64_t compress = 2;
  std::vector<int64_t> upsampling_ratios{8, 6, 5, 4};  // SEANet strides, applied reversed
  int64_t hidden_size = 512, intermediate_size = 2048, num_hidden_layers = 8;
  int64_t num_attention_heads = 8, num_key_value_heads = 8, head_dim = 64;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t sliding_window = 250;
  int64_t max_position_embeddings = 8000;
  int64_t codebook_dim = 256, codebook_size = 2048;
  int64_t num_quantizers = 32, num_semantic_quantizers = 1;
};

struct CodecConfig {
  int64_t sample_rate = 24000;       // output_sample_rate
  int64_t input_sample_rate = 24000;
  int64_t samples_per_frame = 1920;  // decode_upsample_rate
  int64_t encoder_valid_num_quantizers = 16;
  DecoderConfig decoder;
  EncoderConfig encoder;
};

// The GPU decoder's matrix products: f32 (3xTF32 on tensor cores, f32-level accuracy) or bf16
// (operands rounded to bf16, f32 accumulation: a sixth of the tensor-core instructions, the
// accuracy of a bf16 framework; the official runtime decodes in bf16). Either way a stream's
// samples are the same alone and in any batch; the CPU decoder is f32.
enum class CodecPrecision { kF32, kBf16 };
// "f32" / "bf16".
const char* codec_precision_name(CodecPrecision p);
Result<CodecPrecision> parse_codec_precision(const std::string& name);

// The 12.5 Hz codec (Qwen3-TTS's speech tokenizer, also Breeze TTS 2's) as released, or the
// reference tiny copy.
CodecConfig preset_12hz(bool tiny);

Result<CodecConfig> load_codec_config(const std::string& file);
Result<CodecConfig> parse_codec_config(const nlohmann::json& root, const std::string& label);
nlohmann::json codec_config_to_json(const CodecConfig& c);

}  // namespace chorus::codec
