// The body of POST /v1/audio/speech, parsed and checked field by field before anything is queued:
// OpenAI's fields first, vLLM-Omni's extension names where OpenAI has none. Every failure is a 400
// naming the field; unknown fields are refused (a typo must not be silently ignored).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "audio/stream_encoder.h"
#include "server/api_error.h"

namespace chorus::server {

struct SpeechLimits {
  size_t max_input_chars = 4096;  // Unicode code points of `input`
  size_t max_instructions_chars = 4096;
  size_t max_ref_audio_bytes = 16u << 20;  // decoded
  int64_t max_new_tokens = 100000;
};

struct SpeechParams {
  std::string model;
  std::string input;
  std::string voice;  // a preset name or a stored voice id; empty: none given
  bool voice_is_id = false;  // given as {"id": ...}: a stored voice, never a preset
  std::string instructions;
  audio::StreamFormat format = audio::StreamFormat::kMp3;
  double speed = 1.0;
  bool sse = false;     // stream_format "sse"
  bool stream = true;   // false: the whole body at once, with a Content-Length
  std::string task_type;  // "", "CustomVoice", "VoiceDesign", "Base"
  std::string language = "auto";
  std::string ref_audio;  // decoded bytes of the data URI; empty: none
  std::string ref_text;
  bool x_vector_only = false;
  // Qwen3-TTS's text layout, by the official argument's name: true puts the whole text in the
  // prompt, false feeds one text token per frame (what lets a WebSocket session speak while its
  // text is still being written); unset: the model's default.
  std::optional<bool> non_streaming_mode;
  int64_t max_new_tokens = 0;  // 0: the model's limit
  int64_t min_new_tokens = 0;  // end of speech ignored before this many frames (benchmarks); 0: the default
  std::optional<uint64_t> seed;
  std::optional<float> temperature, top_p, repetition_penalty, cfg_scale;
  std::optional<int32_t> top_k;
};

// Parses a JSON body: the parameters, or a 400 with `param` set where a field is to blame.
struct SpeechParse {
  std::optional<SpeechParams> params;
  ApiError error;
};
SpeechParse parse_speech_body(std::string_view body, const SpeechLimits& limits = {});
// The same checks on a parsed object whose keys are the body's fields plus `extra_fields` (a
// WebSocket message's "type"), with `input` optional when not `input_required`.
SpeechParse parse_speech_object(const nlohmann::json& j, const SpeechLimits& limits, bool input_required,
                                std::initializer_list<const char*> extra_fields = {});

// Strict base64 (RFC 4648 alphabet, '=' padding, no whitespace); nullopt when malformed.
std::optional<std::string> decode_base64(std::string_view s);
std::string encode_base64(std::string_view bytes);

// Code points of valid UTF-8 text.
size_t utf8_length(std::string_view s);

}  // namespace chorus::server
