#include "engine/model.h"

#include "engine/voice_cloner.h"
#include "io/hf_hub.h"
#include "io/model_dir.h"

namespace chorus::engine {

bool Model::clones_voices() const { return generator_->voice_cloner() != nullptr; }

Result<voice::Voice> Model::create_voice(const ReferenceAudio& ref, const std::string& ref_text,
                                            bool with_codes) const {
  const VoiceCloner* c = generator_->voice_cloner();
  if (!c)
    return make_error(ErrorCode::kUnsupported, "this model (" + info().family + " " + info().variant +
                                                   ") cannot clone voices: use a Qwen3-TTS Base or Breeze TTS 2 checkpoint");
  audio::ReadOptions opts;
  opts.target_rate = static_cast<int>(c->voice_sample_rate());
  opts.limits = ref.limits;
  const std::string label = !ref.label.empty() ? ref.label : !ref.path.empty() ? ref.path : "reference audio";
  CHORUS_ASSIGN(audio::Audio a, ref.path.empty() ? audio::decode_audio(ref.bytes, label, opts)
                                                 : audio::read_audio(ref.path, opts));
  auto v = c->encode_voice(a.samples.data(), static_cast<int64_t>(a.samples.size()), with_codes);
  if (!v.ok()) return make_error(v.error().code, label + ": " + v.error().message);
  v->ref_text = ref_text;
  return v;
}

Status Model::apply_voice(const voice::Voice& voice, const std::string& label, SynthesisRequest& r,
                          std::string* note) const {
  const VoiceCloner* c = generator_->voice_cloner();
  if (!c)
    return make_error(ErrorCode::kUnsupported, label + ": this model (" + info().family + " " + info().variant +
                                                   ") cannot use a cloned voice");
  return c->apply_voice(voice, label, r, note);
}

namespace {

// A folder, a cached Hugging Face id, or (when asked) one downloaded now.
Result<std::string> model_dir(const std::string& spec, const LoadOptions& options) {
  auto dir = io::resolve_model_dir(spec);
  io::HubRepoId id;
  if (dir.ok() || dir.error().code != ErrorCode::kNotFound || !options.download || !io::parse_hub_repo_id(spec, &id))
    return dir;
  io::HubOptions ho;
  ho.progress = options.download_progress;
  auto got = io::hf_hub_download_model(spec, ho);
  if (!got.ok()) return std::move(got).error();
  return io::resolve_model_dir(spec);
}

}  // namespace

Result<std::shared_ptr<const Model>> load(const std::string& spec, const LoadOptions& options) {
  if (options.codec && !options.device.is_cuda() && options.codec_precision != codec::CodecPrecision::kF32)
    return make_error(ErrorCode::kInvalidArgument, "codec precision bf16 needs the codec on the GPU (--device cuda)");
  CHORUS_ASSIGN(const std::string dir, model_dir(spec, options));
  std::shared_ptr<Model> m(new Model());
  m->device_ = options.device;
  m->weights_ = options.weights;
  m->dir_ = dir;
  m->pool_ = options.pool ? options.pool : &ThreadPool::global();
  LoadOptions o = options;
  o.pool = m->pool_;
  CHORUS_ASSIGN(m->generator_, load_tts_model(dir, o));
  if (options.codec) {
    CHORUS_ASSIGN(m->codec_, load_codec(dir, options.device, m->pool_, options.codec_precision));
  }
  return std::shared_ptr<const Model>(std::move(m));
}

}  // namespace chorus::engine
