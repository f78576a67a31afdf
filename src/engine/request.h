// What a caller asks for, independent of the model family: one request struct for every mode
// (preset speaker, voice design, voice cloning), text as a string or as ids, the voice reference as
// plain data (a speaker embedding and reference codes, from the audio encoders or from anywhere),
// sampler overrides and stopping limits. Families reject what they cannot use, with a clear error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chorus::engine {

enum class TextLayout {
  kModelDefault,  // the official API's default for the model
  kStreaming,     // text fed one token per frame ("streaming text")
  kFull,          // the whole text in the prompt
};

// How a model stores its activations: as its official bf16 run does (rounded to bf16 after every
// op), or in f32 (the exactness mode the reference goldens use). Breeze TTS 2 honours it (default
// bf16); Qwen3-TTS computes in f32 either way.
enum class ActivationPrecision { kModelDefault, kF32, kBF16 };

// Unset fields take the checkpoint's defaults (generation_config.json).
struct SamplerOverrides {
  std::optional<bool> greedy;
  std::optional<float> temperature;  // 0 means greedy
  std::optional<int32_t> top_k;      // 0: off
  std::optional<float> top_p;        // 1: off
  std::optional<float> repetition_penalty;  // codebook 0 only
};

// The safety cap against runaway generation (docs/generation.md):
//   max frames <= frames_per_token · text tokens + slack_frames.
// frames_per_token <= 0 turns the cap off.
struct LengthCap {
  double frames_per_token = 10.0;
  int64_t slack_frames = 50;
};
// The cap for a text of `text_tokens` tokens (INT64_MAX when off).
int64_t length_cap_frames(const LengthCap& cap, int64_t text_tokens);

struct SynthesisRequest {
  // Exactly one of text / text_ids. Ids are already wrapped as the official wrapper wraps them
  // (for Qwen3-TTS: <|im_start|>assistant\n … <|im_end|>\n<|im_start|>assistant\n).
  std::string text;
  std::vector<int32_t> text_ids;
  // Style instruction or voice description: a string or wrapped ids; empty: none.
  std::string instruct;
  std::vector<int32_t> instruct_ids;
  std::string speaker;            // preset speaker name
  std::string language = "auto";  // "auto" or a language the model lists
  // Voice reference for cloning.
  std::vector<float> speaker_embedding;          // x-vector
  std::vector<std::vector<int32_t>> ref_codes;   // reference frames (codec codes)
  std::string ref_text;                          // transcript of the reference, or ...
  std::vector<int32_t> ref_text_ids;             // ... its wrapped ids
  bool xvector_only = false;                     // clone from the embedding alone
  TextLayout layout = TextLayout::kModelDefault;

  // Classifier-free guidance (Breeze TTS 2): one scale (1: off), or dual (reference, instruction).
  std::optional<float> cfg_scale;
  std::optional<std::pair<float, float>> dual_cfg;

  SamplerOverrides sampler;        // codebook 0
  SamplerOverrides depth_sampler;  // the other codebooks
  int64_t max_frames = 0;          // 0: the checkpoint's limit
  int64_t min_frames = -1;         // -1: the official default (2)
  LengthCap length_cap;
  uint64_t seed = 0;
  uint32_t rng_stream = 0;  // different takes with one seed
  ActivationPrecision activations = ActivationPrecision::kModelDefault;
};

}  // namespace chorus::engine
