#include "voice_input.h"

#include "engine/breeze_engine.h"
#include "engine/qwen3_tts_engine.h"
#include "io/json_util.h"
#include "models/qwen3_tts/voice_encoder.h"
#include "runtime/cpu/quant.h"

namespace chorus::cli {

void RefAudioOptions::add_to(CLI::App& app) {
  app.add_option("--min-ref-seconds", min_seconds, "Shortest reference audio accepted")->capture_default_str();
  app.add_option("--max-ref-seconds", max_seconds, "Longest reference audio accepted")->capture_default_str();
}

audio::AudioLimits RefAudioOptions::limits() const {
  audio::AudioLimits l;
  l.min_seconds = min_seconds;
  l.max_seconds = max_seconds;
  return l;
}

Result<std::vector<int32_t>> read_id_array(const std::string& arg, const char* option) {
  const size_t first = arg.find_first_not_of(" \t\r\n");
  const bool inline_json = first != std::string::npos && arg[first] == '[';
  CHORUS_ASSIGN(io::Json j, inline_json ? io::parse_json(arg, option) : io::read_json_file(arg));
  if (!j.is_array() || j.empty())
    return make_error(ErrorCode::kInvalidArgument, std::string(option) + ": expected a non-empty JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      return make_error(ErrorCode::kInvalidArgument, std::string(option) + ": every id must be an integer in [0, 2^31)");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

Result<engine::ActivationPrecision> activation_precision_from_name(const std::string& name) {
  if (name.empty()) return engine::ActivationPrecision::kModelDefault;
  if (name == "bf16") return engine::ActivationPrecision::kBF16;
  if (name == "f32") return engine::ActivationPrecision::kF32;
  return make_error(ErrorCode::kInvalidArgument, "--activations: expected bf16 or f32, not \"" + name.substr(0, 32) + "\"");
}

Result<engine::WeightFormat> weight_format_option(const std::string& name, const std::string& device) {
  const auto f = cpu::weight_format_from_name(name);
  if (!f) return make_error(ErrorCode::kInvalidArgument, "--weights: expected bf16, int8 or int4, not \"" + name.substr(0, 32) + "\"");
  if (*f != engine::WeightFormat::kBf16 && device != "cpu")
    return make_error(ErrorCode::kUnsupported, "--weights " + name + " runs on the CPU only (use --device cpu)");
  return *f;
}

namespace {

// Breeze TTS 2: reference codes (no x-vector) from the audio or the voice file, plus the transcript.
Status apply_breeze_voice(const engine::BreezeEngine& model, const VoiceSource& src, engine::SynthesisRequest& r) {
  if (r.xvector_only) return make_error(ErrorCode::kInvalidArgument, "Breeze TTS 2 has no x-vector: drop --xvector-only");
  if (!src.ref_audio.empty()) {
    CHORUS_ASSIGN(const qwen3_tts::Voice v, model.encode_voice(src.ref_audio, src.audio.limits()));
    return model.apply_voice(v, src.ref_audio, r);
  }
  CHORUS_ASSIGN(const qwen3_tts::Voice v, qwen3_tts::read_voice_file(src.voice_file));
  return model.apply_voice(v, src.voice_file, r);
}

}  // namespace

Status apply_voice(const engine::TtsModel& model, const VoiceSource& src, engine::SynthesisRequest& r, std::string* note) {
  if (src.ref_audio.empty() && src.voice_file.empty()) return ok_status();
  auto bad = [](const std::string& m) { return make_error(ErrorCode::kInvalidArgument, m); };
  if (!src.ref_audio.empty() && !src.voice_file.empty()) return bad("give at most one of --ref-audio and --voice");
  if (!r.speaker_embedding.empty() || !r.ref_codes.empty())
    return bad("--ref-audio / --voice already give the speaker embedding and reference codes: drop --speaker-embedding / --ref-codes");
  if (const auto* b = dynamic_cast<const engine::BreezeEngine*>(&model)) return apply_breeze_voice(*b, src, r);
  const auto* q = dynamic_cast<const engine::Qwen3TtsEngine*>(&model);
  if (!q) return make_error(ErrorCode::kUnsupported, "voice cloning from audio needs a Qwen3-TTS Base or Breeze TTS 2 checkpoint");
  const qwen3_tts::Model& m = q->model();
  const bool cli_text = !r.ref_text.empty() || !r.ref_text_ids.empty();

  qwen3_tts::Voice voice;
  std::string label;
  if (!src.ref_audio.empty()) {
    label = src.ref_audio;
    CHORUS_ASSIGN(qwen3_tts::VoiceEncoder enc, qwen3_tts::VoiceEncoder::from_files(m.files(), m.pool()));
    const bool icl = !r.xvector_only && cli_text;
    CHORUS_ASSIGN(voice, enc.encode_file(src.ref_audio, icl, src.audio.limits()));
  } else {
    label = src.voice_file;
    CHORUS_ASSIGN(voice, qwen3_tts::read_voice_file(src.voice_file));
    CHORUS_TRY(qwen3_tts::check_voice_for_model(voice, m.config(), src.voice_file));
    if (cli_text && voice.has_ref_text())
      return bad(src.voice_file + " holds its reference text already: drop --ref-text / --ref-text-ids");
    r.ref_text = voice.ref_text;
    r.ref_text_ids = voice.ref_text_ids;
  }
  r.speaker_embedding = voice.x_vector;
  const bool has_text = !r.ref_text.empty() || !r.ref_text_ids.empty();
  if (!r.xvector_only && (!has_text || !voice.has_codes())) {
    r.xvector_only = true;
    if (note)
      *note = label + (has_text ? " has no reference codes" : ": no reference text") +
              ", so the voice is cloned from its x-vector alone (--ref-text enables in-context cloning)";
  }
  if (!r.xvector_only)
    for (int64_t t = 0; t < voice.frames; ++t)
      r.ref_codes.emplace_back(voice.ref_codes.begin() + t * voice.codebooks, voice.ref_codes.begin() + (t + 1) * voice.codebooks);
  return ok_status();
}

}  // namespace chorus::cli
