// The Qwen3-TTS engine with generation on the GPU (tts_model_cuda.h).
#include "engine/tts_model_cuda.h"

#include "engine/breeze_engine_cuda.h"
#include "engine/registry.h"
#include "io/model_dir.h"
#include "models/family.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <limits>
#include <mutex>
#include <optional>

#include "engine/device_batch.h"
#include "engine/qwen3_tts_engine.h"
#include "engine/text_feed.h"
#include "models/qwen3_tts/frame_batch_cuda.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::engine {

namespace {

using Frames = qwen3_tts::gpu::FrameBatch;
namespace q3 = qwen3_tts;

// Per-slot buffers of a frame pool besides its caches (logits, sampler scratch, penalty history,
// inputs): ~0.1 MiB at the real models' vocabularies, rounded up.
constexpr double kSlotOverheadBytes = 256.0 * 1024;

class CudaStream : public DeviceStream<Frames> {
 public:
  int64_t max_frames() const override { return settings.max_frames; }
  int64_t text_tokens() const override { return text_tokens_; }
  int64_t prompt_rows() const override { return prompt.prefill_rows; }
  size_t state_bytes() const override {
    return batch_share_bytes((prompt.prefill.size() + prompt.trailing.size()) * sizeof(float), page_bytes);
  }

  q3::Prompt prompt;  // its rows are dropped at admission
  q3::GenerationSettings settings;
  int64_t text_tokens_ = 0;
  size_t page_bytes = 0;  // of the engine's KV pages
  // Trailing text rows that arrived after admission, for the slot before the next frame.
  std::vector<float> pending;
  int64_t pending_rows = 0;
};

// A stream whose text arrives while it runs. The host side is the CPU engine's
// (Qwen3TextInput): when it may start and with which prompt, its trailing rows as their tokens
// arrive, when a frame may be made. Rows that come before admission join the prompt; later ones
// go to the slot before the next frame. While its next frame's row has not come, the pools park
// its slot (frame_pools.h).
class CudaTextStream final : public CudaStream {
 public:
  CudaTextStream(std::unique_ptr<Qwen3TextInput> input, std::shared_ptr<const nn::gpu::KvPagePool> pages)
      : input_(std::move(input)), pages_(std::move(pages)) {
    settings = input_->settings();
  }
  int64_t text_tokens() const override { return input_->text_tokens(); }
  bool has_input_for(int64_t frame) const override { return input_->may_make(frame, rows_); }

  Result<bool> ready() override {
    if (finished()) return true;
    if (!input_->closed()) {
      input_->read();
      if (!input_->started()) {
        if (!input_->can_start()) return false;
        CHORUS_ASSIGN(Qwen3TextInput::Start st, input_->start());
        prompt = std::move(st.prompt);
        settings = st.settings;
        rows_ = prompt.trailing_rows;
        // Its reservation (at admission) covers this limit; the cap when the text ends only lowers it.
        if (pages_)
          CHORUS_TRY(check_kv_room(*pages_, Frames::kv_pages_for_stream(prompt.prefill_rows + settings.max_frames, 1)));
      }
      CHORUS_ASSIGN(Qwen3TextInput::Rows rows, input_->take_rows());
      if (rows.count > 0) {
        std::vector<float>& to = batch ? pending : prompt.trailing;
        to.insert(to.end(), rows.data.begin(), rows.data.end());
        (batch ? pending_rows : prompt.trailing_rows) += rows.count;
        rows_ += rows.count;
      }
      if (rows.closed) settings.max_frames = std::min(settings.max_frames, rows.cap_frames);
    }
    return has_input_for(made);
  }

 private:
  std::unique_ptr<Qwen3TextInput> input_;
  std::shared_ptr<const nn::gpu::KvPagePool> pages_;
  int64_t rows_ = 0;  // trailing rows the stream holds: its prompt's, pending or on the device
};

class CudaQwen3Engine final : public DeviceEngine<Qwen3TtsEngine> {
 public:
  static Result<std::unique_ptr<CudaQwen3Engine>> load(const std::string& dir, const CudaLoadOptions& o) {
    CHORUS_CUDA_TRY(cudaSetDevice(o.device));
    std::unique_ptr<CudaQwen3Engine> e(new CudaQwen3Engine());
    ThreadPool* pool = o.pool ? o.pool : &ThreadPool::global();
    CHORUS_ASSIGN(e->cpu_, Qwen3TtsEngine::load(dir, pool));
    e->model_ = std::shared_ptr<const q3::Model>(std::shared_ptr<const q3::Model>(), &e->cpu_->model());
    CHORUS_ASSIGN(e->dev_, q3::gpu::upload_model(e->model_, o.weights, pool));
    e->info_ = e->cpu_->info();
    e->split_frames_ = o.split_frames;
    e->batch_invariant_ = o.batch_invariant;
    const nn::Qwen3Dims& d = e->dev_->talker().dims();
    CHORUS_ASSIGN(e->pools_.pages, nn::gpu::KvPagePool::create(d.layers, e->dev_->talker().kv_width(), o.kv_cache_bytes));
    e->pools_.set_first_slots(o.first_pool_slots);
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

  // Text in pieces: the CPU engine checks the request and makes the feed; the stream waits in
  // its slot while its next text row has not come (frame_pools.h).
  Result<std::unique_ptr<TtsStream>> create_text_stream(const SynthesisRequest& r,
                                                        std::shared_ptr<TextFeed>* feed) const override {
    if (!feed) return make_error(ErrorCode::kInternal, "create_text_stream: no feed to fill");
    CHORUS_ASSIGN(std::unique_ptr<Qwen3TextInput> input, cpu_->text_input(r));
    *feed = input->feed();
    auto s = std::make_unique<CudaTextStream>(std::move(input), pools_.pages);
    s->owner = this;
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
      CHORUS_ASSIGN(auto frames, Frames::create_pool(dev_, slots, positions, pools_.pages, batch_invariant_));
      frames->set_split_frames(split_frames_);
      return frames;
    };
    const auto admit = [&](Frames& fb, const std::vector<int>& slots, const std::vector<size_t>& idx) -> Status {
      std::vector<q3::gpu::StreamSetup> setups;
      for (size_t i : idx) setups.push_back({&ss[i]->prompt, ss[i]->settings});
      CHORUS_TRY(fb.admit(slots, setups));
      for (size_t i : idx) {
        std::vector<float>().swap(ss[i]->prompt.prefill);
        std::vector<float>().swap(ss[i]->prompt.trailing);
      }
      return ok_status();
    };
    std::lock_guard<std::mutex> lock(pools_mu_);
    CHORUS_TRY(upload_pending_text(ss));
    return step_pooled_streams<Frames>(pools_, ss, out, static_cast<int32_t>(model_->config().talker.codec_eos_id),
                                       dev_->groups(), need, create, admit,
                                       [](const CudaStream& s) { return s.settings.max_frames; }, times);
  }

  // The page pool is thread-safe: no need for the pools' lock (a gauge may read it during a step).
  std::optional<nn::KvPageStats> kv_pages() const override { return pools_.pages->stats(); }

 private:
  // Text rows that arrived for streams in slots go to the device before any frame reads them: one
  // call per pool.
  static Status upload_pending_text(const std::vector<CudaStream*>& ss) {
    std::vector<std::pair<Frames*, std::vector<Frames::TextAppend>>> by_pool;
    for (CudaStream* s : ss) {
      if (!s->batch || s->finished() || s->pending_rows == 0) continue;
      Frames* fb = s->batch->frames.get();
      auto it = std::find_if(by_pool.begin(), by_pool.end(), [&](const auto& p) { return p.first == fb; });
      if (it == by_pool.end()) it = by_pool.insert(by_pool.end(), {fb, {}});
      it->second.push_back({s->slot, s->pending.data(), s->pending_rows});
    }
    for (auto& [fb, appends] : by_pool) CHORUS_TRY(fb->append_text(appends));
    for (CudaStream* s : ss) {
      if (!s->batch || s->pending_rows == 0) continue;
      s->pending.clear();
      s->pending_rows = 0;
    }
    return ok_status();
  }

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
  bool batch_invariant_ = false;  // CudaLoadOptions::batch_invariant
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
