#include "models/breeze_tts/voice.h"

namespace chorus::breeze_tts {

std::string codec_signature(const codec::CodecConfig& c) {
  return "12hz-" + std::to_string(c.input_sample_rate) + "-" + std::to_string(c.samples_per_frame) + "-" +
         std::to_string(c.encoder_valid_num_quantizers) + "x" + std::to_string(c.encoder.codebook_size);
}

Result<VoiceEncoder> VoiceEncoder::from_files(const ModelFiles& files, ThreadPool* pool) {
  if (!files.codec_has_encoder)
    return make_error(ErrorCode::kNotFound, files.dir + ": the audio_tokenizer has no encoder weights, so reference "
                                            "audio cannot be encoded (give --ref-codes instead)");
  CHORUS_ASSIGN(codec::SpeechEncoder speech, codec::SpeechEncoder::load(files.codec, files.config.codec));
  if (speech.codebooks() != files.config.num_codebooks)
    return make_error(ErrorCode::kShapeMismatch, files.dir + ": the speech encoder keeps " + std::to_string(speech.codebooks()) +
                                                     " codebooks but the model uses " + std::to_string(files.config.num_codebooks));
  if (speech.codebook_size() != files.config.codec_codebook_size)
    return make_error(ErrorCode::kShapeMismatch, files.dir + ": the speech encoder's codebooks have " +
                                                     std::to_string(speech.codebook_size()) + " entries, the model's " +
                                                     std::to_string(files.config.codec_codebook_size));
  speech.set_thread_pool(pool);
  return VoiceEncoder(std::move(speech), codec_signature(files.config.codec));
}

Result<voice::Voice> VoiceEncoder::encode(const float* samples, int64_t n) const {
  CHORUS_ASSIGN(codec::EncodedCodes c, speech_.encode(samples, n));
  voice::Voice v;
  v.model_family = voice::kVoiceFamilyBreeze;
  v.codebooks = c.codebooks;
  v.frames = c.frames;
  v.ref_codes = std::move(c.codes);
  v.codec = signature_;
  v.ref_seconds = static_cast<double>(n) / static_cast<double>(sample_rate());
  return v;
}

Result<voice::Voice> VoiceEncoder::encode_file(const std::string& path, const audio::AudioLimits& limits) const {
  audio::ReadOptions opts;
  opts.target_rate = static_cast<int>(sample_rate());
  opts.limits = limits;
  CHORUS_ASSIGN(audio::Audio a, audio::read_audio(path, opts));
  auto v = encode(a.samples.data(), static_cast<int64_t>(a.samples.size()));
  if (!v.ok()) return make_error(v.error().code, path + ": " + v.error().message);
  return v;
}

Status check_voice_for_model(const voice::Voice& v, const Config& c, const std::string& label) {
  if (v.model_family != voice::kVoiceFamilyBreeze)
    return make_error(ErrorCode::kUnsupported, label + ": the voice was made for a " + v.model_family.substr(0, 64) +
                                                   " model, not Breeze TTS 2; make one with `chorus voice create --model "
                                                   "<Breeze checkpoint>`");
  if (!v.has_codes()) return make_error(ErrorCode::kInvalidArgument, label + ": the voice holds no reference codes");
  const std::string mine = codec_signature(c.codec);
  if (!v.codec.empty() && v.codec != mine)
    return make_error(ErrorCode::kUnsupported, label + ": the voice's codes come from codec " + v.codec +
                                                   ", this model's codec is " + mine);
  if (v.codebooks != c.num_codebooks)
    return make_error(ErrorCode::kShapeMismatch, label + ": the voice's reference codes have " + std::to_string(v.codebooks) +
                                                     " codebooks, the model " + std::to_string(c.num_codebooks));
  for (size_t i = 0; i < v.ref_codes.size(); ++i)
    if (v.ref_codes[i] >= c.codec_codebook_size)
      return make_error(ErrorCode::kOutOfRange, label + ": reference code " + std::to_string(v.ref_codes[i]) + " at frame " +
                                                    std::to_string(i / static_cast<size_t>(v.codebooks)) +
                                                    " is outside the codebook");
  return ok_status();
}

}  // namespace chorus::breeze_tts
