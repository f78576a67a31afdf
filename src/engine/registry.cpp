#include "engine/registry.h"

#include "engine/breeze_engine.h"
#include "engine/breeze_engine_cuda.h"
#include "engine/qwen3_tts_engine.h"
#include "engine/tts_model_cuda.h"

namespace chorus::engine {

namespace {

template <class Engine>
Result<std::unique_ptr<TtsModel>> load_cpu(const std::string& dir, const LoadOptions& o) {
  CHORUS_ASSIGN(auto e, Engine::load(dir, o.pool ? o.pool : &ThreadPool::global()));
  return std::unique_ptr<TtsModel>(std::move(e));
}

Result<std::unique_ptr<TtsModel>> qwen3_cuda(const std::string& dir, const LoadOptions& o) {
  return load_cuda_qwen3_model(dir, {o.device.index, o.pool});
}

Result<std::unique_ptr<TtsModel>> breeze_cuda(const std::string& dir, const LoadOptions& o) {
  return load_cuda_breeze_model(dir, {o.device.index, o.pool});
}

constexpr FamilyLoader kFamilies[] = {
    {Family::kQwen3Tts, &load_cpu<Qwen3TtsEngine>, &qwen3_cuda},
    {Family::kBreezeTts, &load_cpu<BreezeEngine>, &breeze_cuda},
};

}  // namespace

std::span<const FamilyLoader> family_loaders() { return kFamilies; }

}  // namespace chorus::engine
