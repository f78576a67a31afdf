// Voice files (NAME.voice, docs/voice.md): a cloned voice encoded once — the reference's x-vector,
// its reference codes and its transcript — to be reused by `chorus say --voice`; shared by every family. The file is a
// small safetensors file (format "chorus-voice", version "1"):
//
//   __metadata__  format, version, model_family, speaker_dim, codebooks, and optionally ref_text
//                 (UTF-8) or ref_text_ids (a JSON array of wrapped ids), ref_seconds
//   x_vector      F32 [speaker_dim]
//   ref_codes     I32 [frames, codebooks]   (optional)
//
// Breeze TTS 2 voices (model_family "breeze-tts") have no x-vector (speaker_dim 0, no x_vector
// tensor) and must hold reference codes; their ref_text_ids are the transcript's raw ids (Breeze
// adds <bos> and the speaker tag itself), and an optional `codec` key names the codec's shape.
//
// Voice files are untrusted input: everything is validated (sizes capped before allocation, values
// finite and in range, no unknown tensors) and a bad file gives an error, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace chorus::voice {

inline constexpr const char* kVoiceFormat = "chorus-voice";
inline constexpr const char* kVoiceVersion = "1";
inline constexpr const char* kVoiceFamilyQwen3 = "qwen3-tts";
inline constexpr const char* kVoiceFamilyBreeze = "breeze-tts";

struct Voice {
  std::string model_family = kVoiceFamilyQwen3;
  std::vector<float> x_vector;
  std::vector<int32_t> ref_codes;  // [frames, codebooks], row-major; empty: none
  int64_t frames = 0;
  int64_t codebooks = 0;
  std::string ref_text;               // transcript of the reference, or ...
  std::vector<int32_t> ref_text_ids;  // ... its ids, wrapped (<|im_start|>assistant\n ... <|im_end|>\n)
  double ref_seconds = 0;             // length of the reference audio (informational)
  std::string codec;                  // Breeze voices: the codec that made the codes (codec_signature)

  bool has_codes() const { return frames > 0; }
  bool has_ref_text() const { return !ref_text.empty() || !ref_text_ids.empty(); }
};

struct VoiceLimits {
  uint64_t max_file_bytes = 16ull << 20;
  int64_t max_speaker_dim = 16384;
  int64_t max_frames = 12500 * 6;  // 100 minutes at 12.5 Hz
  int64_t max_codebooks = 64;
  int64_t max_code = 65535;        // codes lie in [0, max_code]; the model checks its own codebook size
  size_t max_ref_text_bytes = 64 << 10;
  size_t max_ref_text_ids = 16384;
  float max_abs_x_vector = 1e6f;
};

// Every field consistent and in range (the checks a file gets on load); `label` names it.
Status check_voice(const Voice& v, const std::string& label, const VoiceLimits& limits = {});
Result<Voice> read_voice_file(const std::string& path, const VoiceLimits& limits = {});
// The same checks on bytes in memory (tests, fuzzing); `label` names them in errors.
Result<Voice> parse_voice_file(std::string_view bytes, const std::string& label, const VoiceLimits& limits = {});
// Validates `v` (check_voice), then writes it atomically (temporary file + rename).
Status write_voice_file(const std::string& path, const Voice& v);

}  // namespace chorus::voice
