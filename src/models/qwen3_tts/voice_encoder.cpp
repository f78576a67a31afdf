#include "models/qwen3_tts/voice_encoder.h"

namespace chorus::qwen3_tts {

Result<VoiceEncoder> VoiceEncoder::from_files(const ModelFiles& files, ThreadPool* pool) {
  CHORUS_ASSIGN(SpeakerEncoder speaker, SpeakerEncoder::load(files.main, files.config));
  speaker.set_thread_pool(pool);
  VoiceEncoder v(std::move(speaker));
  v.codebooks_ = files.config.talker.num_code_groups;
  if (files.codec_has_encoder) {
    CHORUS_ASSIGN(codec::SpeechEncoder speech, codec::SpeechEncoder::load(files.codec, files.config.codec));
    if (speech.codebooks() != v.codebooks_)
      return make_error(ErrorCode::kShapeMismatch, files.dir + ": the speech encoder keeps " + std::to_string(speech.codebooks()) +
                                                       " codebooks but the talker uses " + std::to_string(v.codebooks_));
    if (speech.sample_rate() != v.sample_rate())
      return make_error(ErrorCode::kUnsupported, files.dir + ": the speech and speaker encoders expect different sample rates");
    speech.set_thread_pool(pool);
    v.speech_ = std::move(speech);
  }
  return v;
}

Result<VoiceEncoder> VoiceEncoder::load(const std::string& dir, ThreadPool* pool) {
  CHORUS_ASSIGN(ModelFiles files, open_model_files(dir));
  return from_files(files, pool);
}

Result<voice::Voice> VoiceEncoder::encode(const float* samples, int64_t n, bool with_codes) const {
  if (with_codes && !speech_)
    return make_error(ErrorCode::kNotFound, "this checkpoint's speech codec has no encoder weights, so it cannot make "
                                            "reference codes (x-vector-only cloning still works)");
  voice::Voice v;
  CHORUS_ASSIGN(v.x_vector, speaker_.embed(samples, n));
  v.codebooks = codebooks_;
  v.ref_seconds = static_cast<double>(n) / static_cast<double>(sample_rate());
  if (with_codes) {
    CHORUS_ASSIGN(codec::EncodedCodes c, speech_->encode(samples, n));
    v.ref_codes = std::move(c.codes);
    v.frames = c.frames;
  }
  return v;
}

Result<voice::Voice> VoiceEncoder::encode_file(const std::string& path, bool with_codes, const audio::AudioLimits& limits) const {
  audio::ReadOptions opts;
  opts.target_rate = static_cast<int>(sample_rate());
  opts.limits = limits;
  CHORUS_ASSIGN(audio::Audio a, audio::read_audio(path, opts));
  auto v = encode(a.samples.data(), static_cast<int64_t>(a.samples.size()), with_codes);
  if (!v.ok()) return make_error(v.error().code, path + ": " + v.error().message);
  return v;
}

}  // namespace chorus::qwen3_tts
