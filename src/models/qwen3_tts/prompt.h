// The talker prompt of every Qwen3-TTS mode, built exactly as the official generate() builds it
// (spec §3.1–3.3): prefill embeddings, the trailing text rows fed one per decode step, and the
// tts_pad row used after them.
//
// Token ids arrive wrapped as the official wrapper wraps them (spec §3.1):
//   text      <|im_start|> assistant \n  t_1 … t_n  <|im_end|> \n <|im_start|> assistant \n
//   ref text  <|im_start|> assistant \n  r_1 … r_m  <|im_end|> \n
//   instruct  <|im_start|> user \n  … <|im_end|> \n        (all of it is used)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/qwen3_tts/model.h"

namespace chorus::qwen3_tts {

enum class TextLayout {
  kModelDefault,  // the official API default: full text for CustomVoice / VoiceDesign, streaming for Base
  kStreaming,     // "non_streaming_mode=False": one text token per frame, trailing after the prefill
  kFull,          // "non_streaming_mode=True": the whole text in the prefill
};

struct PromptInputs {
  std::vector<int32_t> text_ids;       // wrapped target text
  std::vector<int32_t> instruct_ids;   // wrapped instruction; empty: none
  std::string speaker;                 // CustomVoice preset speaker (case-insensitive)
  std::string language = "auto";       // "auto" or a key of codec_language_id (case-insensitive)
  std::vector<float> speaker_embedding;           // Base: the reference x-vector (hidden wide)
  std::vector<std::vector<int32_t>> ref_codes;    // Base ICL: reference frames, groups() codes each
  std::vector<int32_t> ref_text_ids;              // Base ICL: wrapped reference text
  bool xvector_only = false;                      // Base: ignore ref codes / ref text
  TextLayout layout = TextLayout::kModelDefault;
};

struct Prompt {
  int64_t hidden = 0;
  std::vector<float> prefill;   // [prefill_rows, hidden]
  int64_t prefill_rows = 0;
  std::vector<float> trailing;  // [trailing_rows, hidden]: decode step k adds row k (k < trailing_rows)
  int64_t trailing_rows = 0;
  std::vector<float> pad;       // [hidden]: TextEmb(tts_pad), added once the trailing rows run out
  int64_t text_tokens = 0;      // n, the target text's own tokens (the length cap uses it)
  bool icl = false;
  bool streaming_text = false;
};

// Checks the inputs against the model's variant (which speakers, languages, instructions and voice
// references it accepts) and builds the prompt. Errors name the offending input.
Result<Prompt> build_prompt(const Model& model, const PromptInputs& in);

}  // namespace chorus::qwen3_tts
