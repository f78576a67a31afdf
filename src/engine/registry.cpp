#include "engine/registry.h"

#include "engine/breeze_engine.h"
#include "engine/breeze_engine_cuda.h"
#include "engine/qwen3_tts_engine.h"
#include "engine/tts_model_cuda.h"
#include "runtime/cpu/quant.h"

namespace chorus::engine {

namespace {

template <class Engine>
Result<std::unique_ptr<TtsModel>> load_cpu(const std::string& dir, const LoadOptions& o) {
  CHORUS_ASSIGN(auto e, Engine::load(dir, o.pool ? o.pool : &ThreadPool::global(), o.weights));
  return std::unique_ptr<TtsModel>(std::move(e));
}

Result<std::unique_ptr<TtsModel>> qwen3_cuda(const std::string& dir, const LoadOptions& o) {
  CHORUS_TRY(weights_supported(o.device, o.weights));
  return load_cuda_qwen3_model(dir, {.device = o.device.index, .pool = o.pool, .kv_cache_bytes = o.kv_cache_bytes});
}

Result<std::unique_ptr<TtsModel>> breeze_cuda(const std::string& dir, const LoadOptions& o) {
  CHORUS_TRY(weights_supported(o.device, o.weights));
  return load_cuda_breeze_model(dir, {.device = o.device.index, .pool = o.pool, .kv_cache_bytes = o.kv_cache_bytes});
}

constexpr FamilyLoader kFamilies[] = {
    {Family::kQwen3Tts, &load_cpu<Qwen3TtsEngine>, &qwen3_cuda},
    {Family::kBreezeTts, &load_cpu<BreezeEngine>, &breeze_cuda},
};

}  // namespace

std::span<const FamilyLoader> family_loaders() { return kFamilies; }

Status weights_supported(const Device& device, WeightFormat weights) {
  // Quantised weights exist for the CPU kernels only: a CUDA load asked for them says so rather
  // than running bf16 under another name.
  if (!device.is_cuda() || weights == WeightFormat::kBf16) return ok_status();
  return make_error(ErrorCode::kUnsupported, std::string(cpu::weight_format_name(weights)) +
                                                 " weights run on the CPU only; the CUDA backend loads bf16 weights");
}

}  // namespace chorus::engine
