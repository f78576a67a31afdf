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
  CHORUS_TRY(weights_supported(o.device, o.weights));
  CHORUS_ASSIGN(auto e, Engine::load(dir, o.pool ? o.pool : &ThreadPool::global(), o.weights));
  return std::unique_ptr<TtsModel>(std::move(e));
}

Result<std::unique_ptr<TtsModel>> qwen3_cuda(const std::string& dir, const LoadOptions& o) {
  CHORUS_TRY(weights_supported(o.device, o.weights));
  return load_cuda_qwen3_model(dir, {.device = o.device.index, .pool = o.pool, .split_frames = o.split_frames,
                                     .kv_cache_bytes = o.kv_cache_bytes,
                                     .first_pool_slots = o.first_pool_slots,
                                     .batch_invariant = o.batch_invariant,
                                     .weights = o.weights});
}

Result<std::unique_ptr<TtsModel>> breeze_cuda(const std::string& dir, const LoadOptions& o) {
  CHORUS_TRY(weights_supported(o.device, o.weights));
  return load_cuda_breeze_model(dir, {.device = o.device.index, .pool = o.pool, .split_frames = o.split_frames,
                                      .kv_cache_bytes = o.kv_cache_bytes,
                                      .first_pool_slots = o.first_pool_slots,
                                      .batch_invariant = o.batch_invariant,
                                      .weights = o.weights});
}

constexpr FamilyLoader kFamilies[] = {
    {Family::kQwen3Tts, &load_cpu<Qwen3TtsEngine>, &qwen3_cuda},
    {Family::kBreezeTts, &load_cpu<BreezeEngine>, &breeze_cuda},
};

}  // namespace

std::span<const FamilyLoader> family_loaders() { return kFamilies; }

Status weights_supported(const Device& device, WeightFormat weights) {
  // A format without kernels on the device is refused rather than run as bf16 under another name.
  if (device.is_cuda() && weights == WeightFormat::kInt4)
    return make_error(ErrorCode::kUnsupported, "int4 is CPU only; on CUDA use int8 or fp8 (or bf16)");
  if (!device.is_cuda() && weights == WeightFormat::kFp8)
    return make_error(ErrorCode::kUnsupported, "fp8 weights are CUDA only; on the CPU use int8 or int4 (or bf16)");
  return ok_status();
}

}  // namespace chorus::engine
