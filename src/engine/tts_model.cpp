#include "engine/tts_model.h"

#include "engine/breeze_engine.h"
#include "engine/qwen3_tts_engine.h"
#include "io/model_dir.h"
#include "models/family.h"

namespace chorus::engine {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kRunning: return "running";
    case StopReason::kEos: return "eos";
    case StopReason::kMaxFrames: return "max-frames";
  }
  return "?";
}

Result<std::unique_ptr<TtsModel>> load_tts_model(const std::string& spec, const LoadOptions& options) {
  CHORUS_ASSIGN(const std::string dir, io::resolve_model_dir(spec));
  CHORUS_ASSIGN(const Family family, detect_family(dir));
  ThreadPool* pool = options.pool ? options.pool : &ThreadPool::global();
  switch (family) {
    case Family::kQwen3Tts: {
      CHORUS_ASSIGN(auto e, Qwen3TtsEngine::load(dir, pool, options.weights));
      return std::unique_ptr<TtsModel>(std::move(e));
    }
    case Family::kBreezeTts: {
      CHORUS_ASSIGN(auto e, BreezeEngine::load(dir, pool, options.weights));
      return std::unique_ptr<TtsModel>(std::move(e));
    }
  }
  return make_error(ErrorCode::kUnsupported, dir + ": unknown model family");
}

}  // namespace chorus::engine
