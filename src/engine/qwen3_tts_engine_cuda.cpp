// The Qwen3-TTS engine with generation on the GPU (tts_model_cuda.h).
#include "engine/tts_model_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>

#include "engine/device_batch.h"
#include "engine/qwen3_tts_engine.h"
#include "models/qwen3_tts/frame_batch_cuda.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::engine {

namespace {

using Frames = qwen3_tts::gpu::FrameBatch;
namespace q3 = qwen3_tts;

// Per-slot buffers of a frame pool besides its caches (logits, sampler scratch, penalty history,
// inputs): ~0.1 MiB at the real models' vocabularies, rounded up.
constexpr double kSlotOverheadBytes = 256.0 * 1024;

class CudaStream final : public DeviceStream<Frames> {
 public:
  int64_t max_frames() const override { return settings.max_frames; }
  int64_t text_tokens() const override { return text_tokens_; }
  int64_t prompt_rows() const override { return prompt.prefill_rows; }
  size_t state_bytes() const override {
    return batch_share_bytes((prompt.prefill.size() + prompt.trailing.size()) * sizeof(float), page_bytes);
  }

  q3::Prompt prompt;
  q3::GenerationSettings settings;
  int64_t text_tokens_ = 0;
  size_t page_bytes = 0;  // of the engine's KV pages
};

class CudaQwen3Engine final : public DeviceEngine<Qwen3TtsEngine> {
 public:
  static Result<std::unique_ptr<CudaQwen3Engine>> load(const std::string& dir, const CudaLoadOptions& o) {
    CHORUS_CUDA_TRY(cudaSetDevice(o.device));
    std::unique_ptr<CudaQwen3Engine> e(new CudaQwen3Engine());
    ThreadPool* pool = o.pool ? o.pool : &ThreadPool::global();
    CHORUS_ASSIGN(e->cpu_, Qwen3TtsEngine::load(dir, pool));
    e->model_ = std::shared_ptr<const q3::Model>(std::shared_ptr<const q3::Model>(), &e->cpu_->model());
    CHORUS_ASSIGN(e->dev_, q3::gpu::upload_model(e->model_));
    e->info_ = e->cpu_->info();
    e->split_frames_ = o.split_frames;
    const nn::Qwen3Dims& d = e->dev_->talker().dims();
    CHORUS_ASSIGN(e->pools_.pages, nn::gpu::KvPagePool::create(d.layers, e->dev_->talker().kv_width(), o.kv_cache_bytes));
    return e;
  }

  Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& r) const override {
    // Same request handling as the CPU engine; q3::Stream::create validates the settings.
    if (r.max_frames < 0) return make_error(ErrorCode::kInvalidArgument, "max frames must be >= 0 (0: the checkpoint's limit)");
    if (!(r.length_cap.frames_per_token >= 0) || r.length_cap.slack_frames < 0)
      return make_error(ErrorCode::kInvalidArgument, "the length cap needs frames per token >= 0 and slack >= 0");
    CHORUS_ASSIGN(q3::PromptInputs in, cpu_->prompt_inputs(r));
    CHORUS_ASSIGN(q3::Prompt prompt, q3::build_prompt(*model_, in));
    q3::GenerationSettings g = cpu_->settings(r);
    const int64_t room = model_->config().talker.dims.max_positions - prompt.prefill_rows + 1;
    if (room < 1) return make_error(ErrorCode::kOutOfRange, "the prompt is longer than the talker's context");
    g.max_frames = std::min({g.max_frames, length_cap_frames(r.length_cap, prompt.text_tokens), room});
    CHORUS_TRY(check_kv_room(*pools_.pages, Frames::kv_pages_for_stream(prompt.prefill_rows + g.max_frames, 1)));
    CHORUS_ASSIGN(auto check, q3::Stream::create(model_, prompt, g));
    (void)check;
    auto s = std::make_unique<CudaStream>();
    s->owner = this;
    s->text_tokens_ = prompt.text_tokens;
    s->prompt = std::move(prompt);
    s->settings = g;
    s->page_bytes = pools_.pages->page_bytes();
    return std::unique_ptr<TtsStream>(std::move(s));
  }

  // Any set of this engine's streams may be stepped together: they run in pools that streams join
  // between frames (continuous batching).
  bool joins_running_batch() const override { return true; }

  Status step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const override {
    CHORUS_ASSIGN(const std::vector<CudaStream*> ss, own_streams<CudaStream>(streams, out, this));
    const auto need = [](const CudaStream& s) { return s.prompt.prefill_rows + s.settings.max_frames; };
    const auto create = [&](int slots, int64_t positions) -> Result<std::unique_ptr<Frames>> {
      CHORUS_ASSIGN(slots, pool_slots_that_fit(slots, positions));
      CHORUS_ASSIGN(auto frames, Frames::create_pool(dev_, slots, positions, pools_.pages));
      frames->set_split_frames(split_frames_);
      return frames;
    };
    const auto admit = [&](Frames& fb, const std::vector<int>& slots, const std::vector<size_t>& idx) -> Status {
      std::vector<q3::gpu::StreamSetup> setups;
      for (size_t i : idx) setups.push_back({&ss[i]->prompt, ss[i]->settings});
      CHORUS_TRY(fb.admit(slots, setups));
      for (size_t i : idx) std::vector<float>().swap(ss[i]->prompt.prefill);
      return ok_status();
    };
    std::lock_guard<std::mutex> lock(pools_mu_);
    return step_pooled_streams<Frames>(pools_, ss, out, static_cast<int32_t>(model_->config().talker.codec_eos_id),
                                       dev_->groups(), need, create, admit,
                                       [](const CudaStream& s) { return s.settings.max_frames; }, times);
  }

  // The page pool is thread-safe: no need for the pools' lock (a gauge may read it during a step).
  std::optional<nn::KvPageStats> kv_pages() const override { return pools_.pages->stats(); }

 private:
  // A slot's own memory, its talker cache being paged: the trailing text rows of its positions and
  // its share of the sampler's per-slot buffers.
  Result<int> pool_slots_that_fit(int slots, int64_t positions) const {
    const auto& d = model_->config().talker.dims;
    return slots_that_fit(slots, static_cast<double>(positions) * sizeof(float) * static_cast<double>(d.hidden) +
                                     kSlotOverheadBytes);
  }

  std::shared_ptr<const q3::Model> model_;
  std::shared_ptr<const q3::gpu::DeviceModel> dev_;
  bool split_frames_ = false;  // CudaLoadOptions::split_frames
  // The frame pools: scheduling state, not part of the model; step() is called from one thread at
  // a time in practice (the Synthesizer's scheduler), the lock makes any caller safe.
  mutable std::mutex pools_mu_;
  mutable DevicePools<Frames> pools_;
};

}  // namespace

bool cuda_built() { return true; }

Result<std::unique_ptr<TtsModel>> load_cuda_qwen3_model(const std::string& dir, const CudaLoadOptions& options) {
  CHORUS_ASSIGN(std::unique_ptr<TtsModel> e, CudaQwen3Engine::load(dir, options));
  return e;
}

}  // namespace chorus::engine

#else  // no CUDA in this build

namespace chorus::engine {

bool cuda_built() { return false; }

Result<std::unique_ptr<TtsModel>> load_cuda_qwen3_model(const std::string&, const CudaLoadOptions&) {
  return make_error(ErrorCode::kUnsupported, "this chorus was built without CUDA (configure with -DCHORUS_CUDA=ON)");
}

}  // namespace chorus::engine

#endif

namespace chorus::engine {

Result<std::unique_ptr<TtsModel>> load_cuda_tts_model(const std::string& dir, const CudaLoadOptions& options) {
  LoadOptions o;
  o.device = Device::cuda(options.device);
  o.pool = options.pool;
  o.kv_cache_bytes = options.kv_cache_bytes;
  return load_tts_model(dir, o);
}

}  // namespace chorus::engine
