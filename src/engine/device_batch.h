// What the GPU engines of every family share (Qwen3-TTS, Breeze TTS 2): the frame pools of
// continuous batching (frame_pools.h), their sizing by the free device memory, and the engine's
// CPU half. Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "engine/frame_pools.h"
#include "engine/tts_model.h"
#include "nn/kv_page_pool_cuda.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::engine {

// At most `slots` slots of `bytes_per_slot` device bytes each, as many as the free device memory
// holds with a tenth of the device kept back (the codec's states, other pools' growth).
inline Result<int> slots_that_fit(int slots, double bytes_per_slot) {
  size_t free_bytes = 0, total = 0;
  CHORUS_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  const double room = static_cast<double>(free_bytes) - 0.1 * static_cast<double>(total);
  const int fit = room > 0 && bytes_per_slot > 0 ? static_cast<int>(std::min(room / bytes_per_slot, 1e9)) : 0;
  if (fit < 1) return make_error(ErrorCode::kResourceExhausted, "no device memory left for another stream");
  return std::min(slots, fit);
}

// A stream that needs more KV pages than the device could ever hold is refused at once (the others
// wait for pages: DevicePools).
inline Status check_kv_room(const nn::gpu::KvPagePool& pages, int64_t need) {
  const nn::KvPageStats st = pages.stats();
  if (need <= st.ceiling) return ok_status();
  const auto mib = [&](int64_t n) { return std::to_string(n * st.page_bytes >> 20) + " MiB"; };
  return make_error(ErrorCode::kResourceExhausted, "the request needs " + std::to_string(need) + " KV cache pages (" +
                                                       mib(need) + ") and the device holds at most " +
                                                       std::to_string(st.ceiling) + " (" + mib(st.ceiling) + ")");
}

// The parts of a GPU engine that every family shares: its CPU engine (request handling, voices),
// which outlives the device model (a base's members are destroyed after the derived class's).
template <class CpuEngine>
class DeviceEngine : public TtsModel {
 public:
  const ModelInfo& info() const override { return info_; }
  const VoiceCloner* voice_cloner() const override { return cpu_->voice_cloner(); }

 protected:
  std::unique_ptr<CpuEngine> cpu_;
  ModelInfo info_;
};

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
