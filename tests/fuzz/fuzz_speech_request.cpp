// parse_speech_body on arbitrary bytes, as POST /v1/audio/speech hands it the body: every input
// must give parameters or a 4xx naming what is wrong (never a crash, a hang or an exception), and
// accepted parameters must respect every limit the parser promises. The text splitting that long
// input goes through next and the base64 helpers are checked on the same bytes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/speech_request.h"
#include "server/text_split.h"

namespace {

using namespace chorus::server;

std::string without_space(std::string_view s) {
  std::string o;
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') o.push_back(c);
  return o;
}

// The segments of `text` must be non-empty, no longer than `max_chars` code points, free of
// whitespace at their ends, and together hold every non-space byte of the input in order.
void check_split(std::string_view text, size_t max_chars) {
  const auto segs = split_text(text, max_chars);
  std::string joined;
  for (const auto& s : segs) {
    if (s.empty() || utf8_length(s) > max_chars) std::abort();
    const char f = s.front(), b = s.back();
    if (f == ' ' || f == '\n' || f == '\t' || f == '\r' || b == ' ' || b == '\n' || b == '\t' || b == '\r') std::abort();
    joined += s;
  }
  if (without_space(joined) != without_space(text)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  SpeechLimits limits;
  limits.max_input_chars = 512;
  limits.max_instructions_chars = 256;
  limits.max_ref_audio_bytes = 4096;
  limits.max_new_tokens = 1000;
  const SpeechParse r = parse_speech_body(body, limits);
  if (!r.params) {
    const ApiError& e = r.error;
    if (e.status < 400 || e.status > 499 || e.message.empty()) std::abort();
    // The envelope the client gets must itself be JSON with the error object.
    const auto j = nlohmann::json::parse(e.to_json(), nullptr, false);
    if (j.is_discarded() || !j.contains("error") || !j["error"]["message"].is_string()) std::abort();
  } else {
    const SpeechParams& p = *r.params;
    if (p.model.empty() || p.input.empty() || utf8_length(p.input) > limits.max_input_chars) std::abort();
    if (utf8_length(p.instructions) > limits.max_instructions_chars || p.voice.size() > 256) std::abort();
    if (p.voice_is_id && p.voice.empty()) std::abort();
    if (!(p.speed >= 0.25 && p.speed <= 4.0)) std::abort();
    if (p.ref_audio.size() > limits.max_ref_audio_bytes) std::abort();
    if (p.max_new_tokens < 0 || p.max_new_tokens > limits.max_new_tokens) std::abort();
    if (p.min_new_tokens < 0 || (p.max_new_tokens > 0 && p.min_new_tokens > p.max_new_tokens)) std::abort();
    if (p.temperature && !(*p.temperature >= 0 && *p.temperature <= 2)) std::abort();
    if (p.top_p && !(*p.top_p > 0 && *p.top_p <= 1)) std::abort();
    if (p.top_k && *p.top_k < 0) std::abort();
    if (p.language.empty()) std::abort();
    for (size_t max_chars : {1, 7, 300}) check_split(p.input, max_chars);
  }
  // Base64 of any bytes decodes back to them.
  const std::string_view head = body.substr(0, 512);
  const auto back = decode_base64(encode_base64(head));
  if (!back || *back != head) std::abort();
  // Decoding arbitrary text never reads past it, and what it accepts re-decodes the same.
  if (const auto d = decode_base64(head)) {
    if (d->size() != head.size() / 4 * 3 - (head.size() >= 1 && head.back() == '=') - (head.size() >= 2 && head[head.size() - 2] == '='))
      std::abort();
  }
  return 0;
}
