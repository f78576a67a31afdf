#include "engine/tts_model.h"

#include "engine/registry.h"
#include "io/model_dir.h"
#include "models/family.h"

namespace chorus::engine {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kRunning: return "running";
    case StopReason::kEos: return "eos";
    case StopReason::kMaxFrames: return "max-frames";
    case StopReason::kCancelled: return "cancelled";
  }
  return "?";
}

Result<std::unique_ptr<TtsModel>> load_tts_model(const std::string& spec, const LoadOptions& options) {
  CHORUS_ASSIGN(const std::string dir, io::resolve_model_dir(spec));
  CHORUS_ASSIGN(const Family family, detect_family(dir));
  for (const FamilyLoader& f : family_loaders()) {
    if (f.family != family) continue;
    return options.device.is_cuda() ? f.cuda(dir, options) : f.cpu(dir, options);
  }
  return make_error(ErrorCode::kUnsupported, dir + ": no loader for the " + family_name(family) + " family");
}

}  // namespace chorus::engine

namespace chorus::engine {

Result<std::unique_ptr<TtsStream>> TtsModel::create_text_stream(const SynthesisRequest&, std::shared_ptr<TextFeed>*) const {
  return make_error(ErrorCode::kUnsupported,
                    "this model cannot speak text before it is complete (text in pieces needs Qwen3-TTS in the "
                    "streaming text layout)");
}

}  // namespace chorus::engine
