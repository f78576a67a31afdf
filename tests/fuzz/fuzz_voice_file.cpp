// parse_voice_file on arbitrary bytes: every input must give a Voice or an Error (never a crash, a
// hang or unbounded memory), and an accepted Voice must be internally consistent, pass
// check_voice again, and be checkable against a model config.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "models/breeze_tts/voice.h"
#include "models/qwen3_tts/voice_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace chorus;
  voice::VoiceLimits limits;
  limits.max_file_bytes = 1 << 20;
  auto r = voice::parse_voice_file(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", limits);
  if (!r.ok()) {
    if (r.error().message.empty()) std::abort();
    return 0;
  }
  const voice::Voice& v = *r;
  // Breeze TTS 2 voices hold codes and no x-vector; Qwen3-TTS voices always an x-vector.
  const bool breeze = v.model_family == voice::kVoiceFamilyBreeze;
  if (breeze ? !v.x_vector.empty() || v.frames < 1 : v.x_vector.empty()) std::abort();
  if (static_cast<int64_t>(v.x_vector.size()) > limits.max_speaker_dim) std::abort();
  for (float x : v.x_vector)
    if (!std::isfinite(x)) std::abort();
  if (static_cast<int64_t>(v.ref_codes.size()) != v.frames * v.codebooks) std::abort();
  for (int32_t c : v.ref_codes)
    if (c < 0 || c > limits.max_code) std::abort();
  if (!v.ref_text.empty() && !v.ref_text_ids.empty()) std::abort();
  if (!voice::check_voice(v, "fuzz", limits).ok()) std::abort();
  // Against a 32-wide, 16-codebook config: any answer is fine, a crash is not.
  static const qwen3_tts::Config config = [] {
    qwen3_tts::Config c;
    c.talker.dims.hidden = 32;
    return c;
  }();
  (void)qwen3_tts::check_voice_for_model(v, config, "fuzz");
  static const breeze_tts::Config breeze_config;
  (void)breeze_tts::check_voice_for_model(v, breeze_config, "fuzz");
  return 0;
}
