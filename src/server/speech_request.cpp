#include "server/speech_request.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "io/json_util.h"

namespace chorus::server {

namespace {

using io::Json;

const char* type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

ApiError wrong_type(const std::string& key, const char* want, const Json& v) {
  return bad_request("'" + key + "' must be " + want + ", not " + type_name(v), key);
}

struct Reader {
  const Json& j;
  std::optional<ApiError> err;

  const Json* get(const char* key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return nullptr;
    return &*it;
  }
  void fail(ApiError e) {
    if (!err) err = std::move(e);
  }
  void string(const char* key, std::string& out, size_t max_chars, bool required = false, bool non_empty = false) {
    const Json* v = get(key);
    if (!v) {
      if (required) fail(bad_request(std::string("'") + key + "' is required", key));
      return;
    }
    if (!v->is_string()) return fail(wrong_type(key, "a string", *v));
    const std::string& s = v->get_ref<const std::string&>();
    if (utf8_length(s) > max_chars)
      return fail(bad_request(std::string("'") + key + "' is longer than " + std::to_string(max_chars) + " characters", key,
                              "string_above_max_length"));
    if (s.find('\0') != std::string::npos) return fail(bad_request(std::string("'") + key + "' contains a NUL character", key));
    if (non_empty && s.find_first_not_of(" \t\r\n") == std::string::npos)
      return fail(bad_request(std::string("'") + key + "' must not be empty", key));
    out = s;
  }
  void boolean(const char* key, bool& out) {
    const Json* v = get(key);
    if (!v) return;
    if (!v->is_boolean()) return fail(wrong_type(key, "a boolean", *v));
    out = v->get<bool>();
  }
  // Finite and within [lo, hi] (lo excluded when `open_lo`).
  std::optional<double> number(const char* key, double lo, double hi, bool open_lo = false) {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) {
      fail(wrong_type(key, "a number", *v));
      return std::nullopt;
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || x > hi || (open_lo ? x <= lo : x < lo)) {
      fail(bad_request(std::string("'") + key + "' must be a number in " + (open_lo ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]",
                       key));
      return std::nullopt;
    }
    return x;
  }
  std::optional<int64_t> integer(const char* key, int64_t lo, int64_t hi) {
    const Json* v = get(key);
    if (!v) return std::nullopt;
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        fail(bad_request(std::string("'") + key + "' is out of range", key));
        return std::nullopt;
      }
      x = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      x = static_cast<int64_t>(v->get<double>());
    } else {
      fail(wrong_type(key, "an integer", *v));
      return std::nullopt;
    }
    if (x < lo || x > hi) {
      fail(bad_request(std::string("'") + key + "' must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                       key));
      return std::nullopt;
    }
    return x;
  }
  static std::string fmt(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
};

const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = {
      "model", "input", "voice", "instructions", "response_format", "speed", "stream_format", "task_type", "language",
      "ref_audio", "ref_text", "x_vector_only_mode", "non_streaming_mode", "max_new_tokens", "min_new_tokens", "seed", "temperature", "top_k", "top_p",
      "repetition_penalty", "cfg_scale", "stream"};
  return k;
}

}  // namespace

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::optional<std::string> decode_base64(std::string_view s) {
  if (s.size() % 4 != 0) return std::nullopt;
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(s.size() / 4 * 3);
  for (size_t i = 0; i < s.size(); i += 4) {
    const bool last = i + 4 == s.size();
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i + k];
      if (c == '=' && last && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;  // data after padding
      v[k] = val(c);
      if (v[k] < 0) return std::nullopt;
    }
    const uint32_t w = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>(w >> 16));
    if (pad < 2) out.push_back(static_cast<char>((w >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(w & 0xFF));
  }
  return out;
}

std::string encode_base64(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t w = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(w >> (6 * k)) & 63]);
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t w = uint32_t(uint8_t(bytes[i])) << 16;
    if (rest == 2) w |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(w >> 18) & 63]);
    out.push_back(kAlphabet[(w >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(w >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

SpeechParse parse_speech_body(std::string_view body, const SpeechLimits& limits) {
  SpeechParse out;
  io::JsonLimits jl;
  jl.max_depth = 8;
  auto parsed = io::parse_json(body, "request body", jl);
  if (!parsed.ok()) {
    out.error = bad_request("the body is not valid JSON: " + parsed.error().message, {}, "invalid_json");
    return out;
  }
  return parse_speech_object(*parsed, limits, true);
}

SpeechParse parse_speech_object(const Json& j, const SpeechLimits& limits, bool input_required,
                                std::initializer_list<const char*> extra_fields) {
  SpeechParse out;
  if (!j.is_object()) {
    out.error = bad_request("the body must be a JSON object", {}, "invalid_json");
    return out;
  }
  for (const auto& [k, v] : j.items())
    if (!known_fields().count(k) && std::find(extra_fields.begin(), extra_fields.end(), k) == extra_fields.end()) {
      out.error = bad_request("unrecognized request argument supplied: '" + k + "'", k, "unknown_parameter");
      return out;
    }

  SpeechParams p;
  Reader r{j, std::nullopt};
  r.string("model", p.model, 256, true, true);
  r.string("input", p.input, limits.max_input_chars, input_required, input_required);
  if (const Json* v = r.get("voice")) {
    if (v->is_object()) {
      for (const auto& [k, _] : v->items())
        if (k != "id") r.fail(bad_request("'voice' as an object takes only 'id'", "voice"));
      auto id = v->find("id");
      if (id == v->end() || !id->is_string() || id->get_ref<const std::string&>().empty())
        r.fail(bad_request("'voice.id' must be a non-empty string", "voice"));
      else p.voice = id->get<std::string>(), p.voice_is_id = true;
    } else if (v->is_string()) {
      p.voice = v->get<std::string>();
      if (p.voice.empty()) r.fail(bad_request("'voice' must not be empty", "voice"));
    } else {
      r.fail(wrong_type("voice", "a string or an object {\"id\": ...}", *v));
    }
    if (p.voice.size() > 256) r.fail(bad_request("'voice' is too long", "voice"));
  }
  r.string("instructions", p.instructions, limits.max_instructions_chars);
  std::string fmt = "mp3";
  r.string("response_format", fmt, 16);
  if (!r.err) {
    if (auto f = audio::stream_format_from_name(fmt)) p.format = *f;
    else
      r.fail(bad_request("response_format '" + fmt + "' is not supported; supported formats: " + audio::supported_stream_formats(),
                         "response_format", "unsupported_format"));
  }
  if (auto x = r.number("speed", 0.25, 4.0)) p.speed = *x;
  std::string sf = "audio";
  r.string("stream_format", sf, 16);
  if (!r.err) {
    if (sf == "sse") p.sse = true;
    else if (sf != "audio") r.fail(bad_request("stream_format must be 'audio' or 'sse'", "stream_format"));
  }
  r.string("task_type", p.task_type, 32);
  if (!r.err && !p.task_type.empty() && p.task_type != "CustomVoice" && p.task_type != "VoiceDesign" && p.task_type != "Base")
    r.fail(bad_request("task_type must be CustomVoice, VoiceDesign or Base", "task_type"));
  r.string("language", p.language, 64);
  if (p.language.empty()) p.language = "auto";
  std::string ref;
  r.string("ref_audio", ref, limits.max_ref_audio_bytes / 3 * 4 + 256);
  if (!r.err && !ref.empty()) {
    // data:[<mime>][;param]*;base64,<data>
    const size_t comma = ref.find(',');
    if (ref.rfind("data:", 0) != 0 || comma == std::string::npos ||
        std::string_view(ref).substr(0, comma).find(";base64") == std::string_view::npos) {
      r.fail(bad_request("ref_audio must be a data URI (data:audio/wav;base64,...); URLs are not fetched", "ref_audio"));
    } else if (auto bytes = decode_base64(std::string_view(ref).substr(comma + 1))) {
      if (bytes->empty()) r.fail(bad_request("ref_audio is empty", "ref_audio"));
      else if (bytes->size() > limits.max_ref_audio_bytes) r.fail(bad_request("ref_audio is too large", "ref_audio"));
      else p.ref_audio = std::move(*bytes);
    } else {
      r.fail(bad_request("ref_audio: the base64 data is malformed", "ref_audio"));
    }
  }
  r.string("ref_text", p.ref_text, limits.max_input_chars);
  r.boolean("x_vector_only_mode", p.x_vector_only);
  if (r.get("non_streaming_mode")) {
    bool full = false;
    r.boolean("non_streaming_mode", full);
    p.non_streaming_mode = full;
  }
  if (auto x = r.integer("max_new_tokens", 1, limits.max_new_tokens)) p.max_new_tokens = *x;
  if (auto x = r.integer("min_new_tokens", 1, limits.max_new_tokens)) p.min_new_tokens = *x;
  if (p.min_new_tokens > 0 && p.max_new_tokens > 0 && p.min_new_tokens > p.max_new_tokens)
    r.fail(bad_request("'min_new_tokens' must not exceed 'max_new_tokens'", "min_new_tokens"));
  if (auto x = r.integer("seed", 0, INT64_MAX)) p.seed = static_cast<uint64_t>(*x);
  if (auto x = r.number("temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*x);
  if (auto x = r.integer("top_k", -1, 1000000)) p.top_k = static_cast<int32_t>(*x < 0 ? 0 : *x);
  if (auto x = r.number("top_p", 0.0, 1.0, true)) p.top_p = static_cast<float>(*x);
  if (auto x = r.number("repetition_penalty", 0.0, 10.0, true)) p.repetition_penalty = static_cast<float>(*x);
  if (auto x = r.number("cfg_scale", 0.0, 50.0)) p.cfg_scale = static_cast<float>(*x);
  r.boolean("stream", p.stream);
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.params = std::move(p);
  return out;
}

}  // namespace chorus::server
