#include "voice_input.h"

#include "io/json_util.h"
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

Result<engine::WeightFormat> weight_format_option(const std::string& name) {
  const auto f = cpu::weight_format_from_name(name);
  if (!f)
    return make_error(ErrorCode::kInvalidArgument, "--weights: expected bf16, int8, int4 (CPU only) or fp8 (CUDA only), not \"" +
                                                       name.substr(0, 32) + "\"");
  return *f;
}

Status apply_voice(const engine::Model& model, const VoiceSource& src, engine::SynthesisRequest& r, std::string* note) {
  if (src.ref_audio.empty() && src.voice_file.empty()) return ok_status();
  auto bad = [](const std::string& m) { return make_error(ErrorCode::kInvalidArgument, m); };
  if (!src.ref_audio.empty() && !src.voice_file.empty()) return bad("give at most one of --ref-audio and --voice");
  if (!r.speaker_embedding.empty() || !r.ref_codes.empty())
    return bad("--ref-audio / --voice already give the speaker embedding and reference codes: drop --speaker-embedding / --ref-codes");
  if (!model.clones_voices())
    return make_error(ErrorCode::kUnsupported, "voice cloning from audio needs a Qwen3-TTS Base or Breeze TTS 2 checkpoint");
  if (model.info().family == "breeze-tts" && r.xvector_only)
    return bad("Breeze TTS 2 has no x-vector: drop --xvector-only");
  if (!src.ref_audio.empty()) {
    engine::ReferenceAudio ref;
    ref.path = src.ref_audio;
    ref.limits = src.audio.limits();
    // Reference codes only serve in-context cloning, which needs the transcript.
    const bool with_codes = !r.xvector_only && (!r.ref_text.empty() || !r.ref_text_ids.empty());
    CHORUS_ASSIGN(const voice::Voice v, model.create_voice(ref, "", with_codes));
    return model.apply_voice(v, src.ref_audio, r, note);
  }
  CHORUS_ASSIGN(const voice::Voice v, voice::read_voice_file(src.voice_file));
  return model.apply_voice(v, src.voice_file, r, note);
}

}  // namespace chorus::cli
