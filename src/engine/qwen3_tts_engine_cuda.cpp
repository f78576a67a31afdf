// The Qwen3-TTS engine with generation on the GPU (tts_model_cuda.h).
#include "engine/tts_model_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <limits>

#include "engine/breeze_engine_cuda.h"
#include "engine/qwen3_tts_engine.h"
#include "models/family.h"
#include "models/qwen3_tts/frame_batch_cuda.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::engine {

namespace {

namespace q3 = qwen3_tts;

// Streams of one device batch share this.
struct BatchShare {
  std::unique_ptr<q3::gpu::FrameBatch> frames;
  int unfinished = 0;
};

class CudaStream final : public TtsStream {
 public:
  bool finished() const override { return reason != StopReason::kRunning; }
  StopReason stop_reason() const override { return reason; }
  int64_t frames() const override { return made; }
  int64_t max_frames() const override { return settings.max_frames; }
  int64_t text_tokens() const override { return text_tokens_; }
  int64_t prompt_rows() const override { return prompt.prefill_rows; }
  size_t state_bytes() const override {
    return batch ? batch->frames->device_bytes() / static_cast<size_t>(batch->frames->size())
                 : (prompt.prefill.size() + prompt.trailing.size()) * sizeof(float);
  }

  void finish(StopReason r) {
    if (reason != StopReason::kRunning) return;
    reason = r;
    if (batch) --batch->unfinished;
  }

  const void* owner = nullptr;
  q3::Prompt prompt;
  q3::GenerationSettings settings;
  int64_t text_tokens_ = 0;
  int64_t made = 0;
  StopReason reason = StopReason::kRunning;
  std::shared_ptr<BatchShare> batch;
  int slot = -1;
};

class CudaQwen3Engine final : public TtsModel {
 public:
  static Result<std::unique_ptr<CudaQwen3Engine>> load(const std::string& dir, const CudaLoadOptions& o) {
    CHORUS_CUDA_TRY(cudaSetDevice(o.device));
    std::unique_ptr<CudaQwen3Engine> e(new CudaQwen3Engine());
    ThreadPool* pool = o.pool ? o.pool : &ThreadPool::global();
    CHORUS_ASSIGN(e->cpu_, Qwen3TtsEngine::load(dir, pool));
    // The CPU engine outlives the device model (members are destroyed in reverse order).
    e->model_ = std::shared_ptr<const q3::Model>(std::shared_ptr<const q3::Model>(), &e->cpu_->model());
    CHORUS_ASSIGN(e->dev_, q3::gpu::upload_model(e->model_));
    e->info_ = e->cpu_->info();
    return e;
  }

  const ModelInfo& info() const override { return info_; }

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
    CHORUS_ASSIGN(auto check, q3::Stream::create(model_, prompt, g));
    (void)check;
    auto s = std::make_unique<CudaStream>();
    s->owner = this;
    s->text_tokens_ = prompt.text_tokens;
    s->prompt = std::move(prompt);
    s->settings = g;
    return std::unique_ptr<TtsStream>(std::move(s));
  }

  Status step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const override {
    if (out.size() != streams.size()) return make_error(ErrorCode::kInternal, "step: one result per stream");
    std::vector<CudaStream*> ss;
    for (TtsStream* t : streams) {
      auto* c = dynamic_cast<CudaStream*>(t);
      if (!c || c->owner != this) return make_error(ErrorCode::kInvalidArgument, "step: a stream of another model");
      ss.push_back(c);
    }
    for (StepResult& o : out) {
      o.has_frame = false;
      o.codes.clear();
    }
    std::vector<size_t> active;
    for (size_t i = 0; i < ss.size(); ++i)
      if (!ss[i]->finished()) active.push_back(i);
    if (active.empty()) return ok_status();
    const int32_t eos = static_cast<int32_t>(model_->config().talker.codec_eos_id);

    std::shared_ptr<BatchShare> batch = ss[active[0]]->batch;
    if (!batch) {
      for (size_t i : active)
        if (ss[i]->batch) return make_error(ErrorCode::kUnsupported, "cuda step: new streams mixed with a running batch");
      std::vector<q3::gpu::StreamSetup> setups;
      std::vector<const q3::Prompt*> prompts;
      for (size_t i : active) {
        setups.push_back({&ss[i]->prompt, ss[i]->settings});
        prompts.push_back(&ss[i]->prompt);
      }
      batch = std::make_shared<BatchShare>();
      CHORUS_ASSIGN(batch->frames, q3::gpu::FrameBatch::create(dev_, setups));
      CHORUS_TRY(batch->frames->prefill(prompts));
      batch->unfinished = static_cast<int>(active.size());
      for (size_t a = 0; a < active.size(); ++a) {
        CudaStream& s = *ss[active[a]];
        s.batch = batch;
        s.slot = static_cast<int>(a);
        std::vector<float>().swap(s.prompt.prefill);
        CHORUS_TRY(check_error(*batch, s.slot));
        if (batch->frames->next_c0(s.slot) == eos) s.finish(StopReason::kEos);
      }
      if (times) times->prefill_s += batch->frames->timing().prefill_ms * 1e-3;
    } else {
      for (size_t i : active)
        if (ss[i]->batch != batch) return make_error(ErrorCode::kUnsupported, "cuda step: streams of different batches");
      if (static_cast<int>(active.size()) != batch->unfinished)
        return make_error(ErrorCode::kUnsupported, "cuda step: every unfinished stream of a batch must be stepped together");
    }

    bool any = false, feed = false;
    for (size_t i : active) {
      if (ss[i]->finished()) continue;
      any = true;
      feed = feed || ss[i]->made + 1 < ss[i]->settings.max_frames;
    }
    if (!any) return ok_status();
    q3::gpu::FrameBatch& fb = *batch->frames;
    CHORUS_TRY(fb.run_frame(feed));
    const int G = fb.model().groups();
    for (size_t i : active) {
      CudaStream& s = *ss[i];
      if (s.finished()) continue;
      CHORUS_TRY(check_error(*batch, s.slot));
      const int32_t* c = fb.frame_codes(s.slot);
      out[i].has_frame = true;
      out[i].codes.assign(c, c + G);
      s.made += 1;
      if (s.made >= s.settings.max_frames) s.finish(StopReason::kMaxFrames);
      else if (fb.next_c0(s.slot) == eos) s.finish(StopReason::kEos);
    }
    if (times) {
      times->depth_s += fb.timing().code_predictor_ms * 1e-3;
      times->backbone_s += fb.timing().talker_ms * 1e-3;
    }
    return ok_status();
  }

 private:
  static Status check_error(const BatchShare& b, int slot) {
    const int32_t e = b.frames->error(slot);
    if (e == cuda::kSampleNonFinite) return make_error(ErrorCode::kInternal, "sampler: the model produced a non-finite logit");
    if (e == cuda::kSampleAllMasked) return make_error(ErrorCode::kInternal, "sampler: every id is masked");
    return ok_status();
  }

  std::unique_ptr<Qwen3TtsEngine> cpu_;
  std::shared_ptr<const q3::Model> model_;
  std::shared_ptr<const q3::gpu::DeviceModel> dev_;
  ModelInfo info_;
};

}  // namespace

bool cuda_built() { return true; }

Result<std::unique_ptr<TtsModel>> load_cuda_tts_model(const std::string& dir, const CudaLoadOptions& options) {
  CHORUS_ASSIGN(const Family family, detect_family(dir));
  if (family == Family::kBreezeTts) return load_cuda_breeze_model(dir, options);
  CHORUS_ASSIGN(auto e, CudaQwen3Engine::load(dir, options));
  return std::unique_ptr<TtsModel>(std::move(e));
}

}  // namespace chorus::engine

#else  // no CUDA in this build

namespace chorus::engine {

bool cuda_built() { return false; }

Result<std::unique_ptr<TtsModel>> load_cuda_tts_model(const std::string&, const CudaLoadOptions&) {
  return make_error(ErrorCode::kUnsupported, "this chorus was built without CUDA");
}

Result<std::string> cuda_bench(const CudaBenchOptions&, const std::function<SynthesisRequest(uint64_t, int64_t)>&) {
  return make_error(ErrorCode::kUnsupported, "this chorus was built without CUDA");
}

}  // namespace chorus::engine

#endif
