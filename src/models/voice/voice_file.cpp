#include "models/voice/voice_file.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "io/file_util.h"
#include "io/json_util.h"
#include "io/safetensors.h"

namespace chorus::voice {

namespace {

Error bad(const std::string& label, const std::string& what) {
  return make_error(ErrorCode::kInvalidFormat, label + ": " + what);
}

// A decimal integer metadata value in [lo, hi] (no sign, no spaces, no leading zeros).
Result<int64_t> meta_int(const std::map<std::string, std::string>& meta, const char* key, int64_t lo, int64_t hi,
                         const std::string& label) {
  auto it = meta.find(key);
  if (it == meta.end()) return bad(label, std::string("voice metadata lacks '") + key + "'");
  const std::string& s = it->second;
  if (s.empty() || s.size() > 18 || (s.size() > 1 && s[0] == '0') || s.find_first_not_of("0123456789") != std::string::npos)
    return bad(label, std::string("voice metadata '") + key + "' = \"" + s.substr(0, 32) + "\" is not an integer");
  int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);  // at most 18 digits: cannot overflow
  if (v < lo || v > hi)
    return bad(label, std::string("voice metadata '") + key + "' = " + s + " is out of range [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
  return v;
}

Result<std::vector<int32_t>> parse_ids(const std::string& text, const std::string& label, const VoiceLimits& limits) {
  io::JsonLimits jl;
  jl.max_bytes = 16 * limits.max_ref_text_ids + 16;
  jl.max_depth = 2;
  CHORUS_ASSIGN(io::Json j, io::parse_json(text, label + " ref_text_ids", jl));
  if (!j.is_array() || j.empty()) return bad(label, "voice metadata 'ref_text_ids' must be a non-empty JSON array of ids");
  if (j.size() > limits.max_ref_text_ids) return bad(label, "voice metadata 'ref_text_ids' has too many ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const auto& v : j) {
    if (!v.is_number_integer()) return bad(label, "voice metadata 'ref_text_ids' holds a non-integer");
    const int64_t id = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                              : v.get<int64_t>();
    if (id < 0 || id > INT32_MAX) return bad(label, "voice metadata 'ref_text_ids': id " + std::to_string(id) + " out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

Status check_voice(const Voice& v, const std::string& label, const VoiceLimits& limits) {
  const bool breeze = v.model_family == kVoiceFamilyBreeze;
  if (v.model_family != kVoiceFamilyQwen3 && !breeze)
    return make_error(ErrorCode::kUnsupported, label + ": voice for model family \"" + v.model_family.substr(0, 64) +
                                                   "\" (this chorus knows \"" + kVoiceFamilyQwen3 + "\" and \"" +
                                                   kVoiceFamilyBreeze + "\")");
  const int64_t dim = static_cast<int64_t>(v.x_vector.size());
  if (breeze) {
    // Breeze TTS 2 clones from codes + transcript only.
    if (dim != 0) return bad(label, "a breeze-tts voice has no x_vector");
    if (v.frames < 1) return bad(label, "a breeze-tts voice needs reference codes");
  } else if (dim < 1 || dim > limits.max_speaker_dim) {
    return bad(label, "x_vector has " + std::to_string(dim) + " values (1 to " + std::to_string(limits.max_speaker_dim) + " allowed)");
  }
  if (v.codec.size() > 256 || v.codec.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-./:x") != std::string::npos)
    return bad(label, "voice metadata 'codec' is not a codec signature");
  for (size_t i = 0; i < v.x_vector.size(); ++i)
    if (!(std::fabs(v.x_vector[i]) <= limits.max_abs_x_vector))
      return bad(label, "x_vector[" + std::to_string(i) + "] is not finite or absurdly large");
  if (v.frames < 0 || v.frames > limits.max_frames)
    return bad(label, "ref_codes has " + std::to_string(v.frames) + " frames (at most " + std::to_string(limits.max_frames) + ")");
  if (v.codebooks < (v.frames > 0 ? 1 : 0) || v.codebooks > limits.max_codebooks)
    return bad(label, "codebooks = " + std::to_string(v.codebooks) + " is out of range [1, " + std::to_string(limits.max_codebooks) + "]");
  if (static_cast<int64_t>(v.ref_codes.size()) != v.frames * v.codebooks)
    return bad(label, "ref_codes holds " + std::to_string(v.ref_codes.size()) + " codes, not frames × codebooks");
  for (size_t i = 0; i < v.ref_codes.size(); ++i)
    if (v.ref_codes[i] < 0 || v.ref_codes[i] > limits.max_code)
      return bad(label, "ref_codes frame " + std::to_string(i / v.codebooks) + " codebook " + std::to_string(i % v.codebooks) +
                            ": code " + std::to_string(v.ref_codes[i]) + " is out of range");
  if (!v.ref_text.empty() && !v.ref_text_ids.empty()) return bad(label, "holds both ref_text and ref_text_ids");
  if (v.ref_text.size() > limits.max_ref_text_bytes) return bad(label, "ref_text is too long");
  if (!io::is_valid_utf8(v.ref_text)) return bad(label, "ref_text is not valid UTF-8");
  if (v.ref_text.find('\0') != std::string::npos) return bad(label, "ref_text holds a NUL character");
  if (v.ref_text_ids.size() > limits.max_ref_text_ids) return bad(label, "ref_text_ids has too many ids");
  for (int32_t id : v.ref_text_ids)
    if (id < 0) return bad(label, "ref_text_ids holds a negative id");
  if (!(v.ref_seconds >= 0 && v.ref_seconds <= 1e6)) return bad(label, "ref_seconds is out of range");
  return ok_status();
}

Result<Voice> parse_voice_file(std::string_view bytes, const std::string& label, const VoiceLimits& limits) {
  if (bytes.size() > limits.max_file_bytes)
    return make_error(ErrorCode::kResourceExhausted, label + ": " + std::to_string(bytes.size()) + " bytes is too large for a voice file");
  io::SafetensorsLimits sl;
  sl.max_header_bytes = 1u << 20;
  sl.max_file_bytes = limits.max_file_bytes;
  sl.max_rank = 2;
  sl.max_tensors = 8;
  auto parsed = io::SafetensorsFile::parse(bytes, label, sl);
  if (!parsed.ok()) return make_error(parsed.error().code, "not a valid voice file: " + parsed.error().message);
  const io::SafetensorsFile& f = *parsed;
  const auto& meta = f.metadata();
  auto get = [&](const char* key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string* format = get("format");
  if (!format || *format != kVoiceFormat) return bad(label, "not a chorus voice file (metadata 'format' is not \"chorus-voice\")");
  const std::string* version = get("version");
  if (!version) return bad(label, "voice metadata lacks 'version'");
  if (*version != kVoiceVersion)
    return make_error(ErrorCode::kUnsupported, label + ": voice file version \"" + version->substr(0, 32) +
                                                   "\" is not one this chorus reads (" + kVoiceVersion + ")");
  Voice v;
  if (const std::string* fam = get("model_family")) v.model_family = *fam;
  else return bad(label, "voice metadata lacks 'model_family'");
  const bool breeze = v.model_family == kVoiceFamilyBreeze;
  if (!breeze && v.model_family != kVoiceFamilyQwen3) CHORUS_TRY(check_voice(v, label, limits));  // names the unknown family
  CHORUS_ASSIGN(const int64_t dim, meta_int(meta, "speaker_dim", breeze ? 0 : 1, breeze ? 0 : limits.max_speaker_dim, label));
  if (const std::string* c = get("codec")) v.codec = *c;
  CHORUS_ASSIGN(v.codebooks, meta_int(meta, "codebooks", 0, limits.max_codebooks, label));
  if (const std::string* t = get("ref_text")) v.ref_text = *t;
  if (const std::string* ids = get("ref_text_ids")) {
    CHORUS_ASSIGN(v.ref_text_ids, parse_ids(*ids, label, limits));
  }
  if (const std::string* s = get("ref_seconds")) {
    char* end = nullptr;
    v.ref_seconds = s->size() < 32 ? std::strtod(s->c_str(), &end) : -1;
    if (!end || *end != '\0' || s->empty()) return bad(label, "voice metadata 'ref_seconds' is not a number");
  }

  for (const io::TensorInfo& info : f.tensors()) {
    if (info.name == "x_vector" && !breeze) {
      if (info.dtype != DType::kF32 || info.shape != Shape{dim})
        return bad(label, "x_vector must be F32 [" + std::to_string(dim) + "], not " + shape_to_string(info.shape));
      const Tensor t = f.tensor(info);
      v.x_vector.assign(t.f32(), t.f32() + dim);
    } else if (info.name == "ref_codes") {
      if (info.dtype != DType::kI32 || info.shape.size() != 2 || info.shape[1] != v.codebooks || info.shape[0] < 1 ||
          info.shape[0] > limits.max_frames)
        return bad(label, "ref_codes must be I32 [frames, " + std::to_string(v.codebooks) + "] with 1 to " +
                              std::to_string(limits.max_frames) + " frames, not " + shape_to_string(info.shape));
      const Tensor t = f.tensor(info);
      v.frames = info.shape[0];
      v.ref_codes.assign(t.as<int32_t>(), t.as<int32_t>() + t.numel());
    } else {
      return bad(label, "unknown tensor '" + info.name.substr(0, 64) + "' in a version-1 voice file");
    }
  }
  if (v.x_vector.empty() && !breeze) return bad(label, "voice file has no x_vector");
  CHORUS_TRY(check_voice(v, label, limits));
  return v;
}

Result<Voice> read_voice_file(const std::string& path, const VoiceLimits& limits) {
  CHORUS_ASSIGN(std::string bytes, io::read_file_capped(path, limits.max_file_bytes));
  return parse_voice_file(bytes, path, limits);
}

Status write_voice_file(const std::string& path, const Voice& v) {
  CHORUS_TRY(check_voice(v, path));
  std::map<std::string, std::string> meta = {
      {"format", kVoiceFormat},
      {"version", kVoiceVersion},
      {"model_family", v.model_family},
      {"speaker_dim", std::to_string(v.x_vector.size())},
      {"codebooks", std::to_string(v.codebooks)},
  };
  if (!v.ref_text.empty()) meta["ref_text"] = v.ref_text;
  if (!v.ref_text_ids.empty()) meta["ref_text_ids"] = io::Json(v.ref_text_ids).dump();
  if (!v.codec.empty()) meta["codec"] = v.codec;
  if (v.ref_seconds > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", v.ref_seconds);
    meta["ref_seconds"] = buf;
  }
  std::vector<io::TensorToWrite> tensors;
  const int64_t dim = static_cast<int64_t>(v.x_vector.size());
  if (dim > 0) {
    Tensor x = Tensor::zeros(DType::kF32, {dim});
    std::memcpy(x.f32(), v.x_vector.data(), sizeof(float) * v.x_vector.size());
    tensors.push_back({"x_vector", x});
  }
  if (v.has_codes()) {
    Tensor c = Tensor::zeros(DType::kI32, {v.frames, v.codebooks});
    std::memcpy(c.mut<int32_t>(), v.ref_codes.data(), sizeof(int32_t) * v.ref_codes.size());
    tensors.push_back({"ref_codes", c});
  }
  return io::write_safetensors(path, tensors, meta);
}

}  // namespace chorus::voice
