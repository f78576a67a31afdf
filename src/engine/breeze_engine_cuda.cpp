// The Breeze TTS 2 engine with generation on the GPU (breeze_engine_cuda.h).
#include "engine/breeze_engine_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "engine/breeze_engine.h"
#include "engine/device_batch.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/frame_batch_cuda.h"
#include "models/breeze_tts/text_encoder_cuda.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::engine {

namespace {

namespace bt = breeze_tts;

using Frames = bt::gpu::FrameBatch;

class CudaBreezeStream final : public DeviceStream<Frames> {
 public:
  int64_t max_frames() const override { return setup.max_frames; }
  int64_t text_tokens() const override { return text_tokens_; }
  int64_t prompt_rows() const override { return prompt_rows_; }
  size_t state_bytes() const override {
    size_t n = 0;
    for (const Tensor& t : rows) n += t.nbytes();
    return batch_share_bytes(n, page_bytes);
  }

  std::vector<Tensor> rows;  // each branch's prefill rows (dropped after the prefill)
  bt::gpu::StreamSetup setup;
  int64_t text_tokens_ = 0, prompt_rows_ = 0;
  int64_t prompt_rows_longest = 0;  // of the branches: with max_frames, the positions a slot needs
  size_t page_bytes = 0;            // of the engine's KV pages
};

bt::gpu::Guide guide_of(const bt::GenerationParams& g) {
  switch (g.guidance) {
    case bt::Guidance::kNone: return {0, 0, 0};
    case bt::Guidance::kCfg: return {1, g.cfg_scale, 0};
    case bt::Guidance::kDual: return {2, g.ref_scale, g.ins_scale};
  }
  return {};
}

class CudaBreezeEngine final : public DeviceEngine<BreezeEngine> {
 public:
  static Result<std::unique_ptr<CudaBreezeEngine>> load(const std::string& dir, const CudaLoadOptions& o) {
    CHORUS_CUDA_TRY(cudaSetDevice(o.device));
    std::unique_ptr<CudaBreezeEngine> e(new CudaBreezeEngine());
    e->pool_ = o.pool ? o.pool : &ThreadPool::global();
    CHORUS_ASSIGN(e->cpu_, BreezeEngine::load(dir, e->pool_));
    {  // the weights are copied to the device; the mapping is needed only while uploading
      CHORUS_ASSIGN(const bt::ModelFiles files, bt::open_model_files(dir));
      CHORUS_ASSIGN(e->dev_, bt::gpu::DeviceModel::upload(files.config, files.main, o.weights, e->pool_));
      CHORUS_ASSIGN(e->text_, bt::gpu::TextEncoderCuda::upload(files.config, files.main));
    }
    e->info_ = e->cpu_->info();
    e->split_frames_ = o.split_frames;
    e->first_pool_slots_ = o.first_pool_slots;
    e->batch_invariant_ = o.batch_invariant;
    // One page pool for both activation precisions' pool sets: the caches are f32 rows of the same
    // backbone in all of them.
    const nn::gpu::DeviceStack& bb = e->dev_->backbone();
    CHORUS_ASSIGN(e->pages_, nn::gpu::KvPagePool::create(bb.dims().layers, bb.kv_width(), o.kv_cache_bytes));
    return e;
  }

  Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& r) const override {
    // The CPU engine's request handling; the layouts and limits as BreezeGeneration::start.
    const bt::BreezeModel& m = cpu_->model();
    const bt::Config& c = m.config;
    CHORUS_ASSIGN(bt::PromptParts parts, cpu_->prompt_parts(r));
    CHORUS_ASSIGN(const bt::GenerationParams g, cpu_->params(r, parts));
    CHORUS_TRY(sampling::validate(g.backbone, "backbone sampler"));
    CHORUS_TRY(sampling::validate(g.depth, "depth sampler"));
    CHORUS_ASSIGN(const std::vector<bt::Layout> layouts, bt::branch_layouts(g.layout, g.guidance));
    auto s = std::make_unique<CudaBreezeStream>();
    int64_t longest = 0;
    std::vector<bt::PromptLayout> branch_layouts;
    for (const bt::Layout l : layouts) {
      CHORUS_ASSIGN(bt::PromptLayout pl, bt::build_layout(c, l, parts));
      branch_layouts.push_back(std::move(pl));
    }
    // g.act: the CPU engine's choice (bf16 by default), for the prompt rows and the device stacks.
    // Every branch's text segments go through the GPU text encoder in one pass.
    CHORUS_ASSIGN(s->rows, bt::gpu::prompt_rows_cuda(c, branch_layouts, parts.ref, *text_, m.audio_table, g.act));
    for (const Tensor& rows : s->rows) longest = std::max(longest, rows.dim(0));
    s->prompt_rows_longest = longest;
    int64_t limit = g.max_frames > 0 ? g.max_frames : c.generation.max_new_tokens;
    limit = std::min(limit, std::max<int64_t>(0, c.generation.max_seq_len - longest + 1));
    if (limit < 1) return make_error(ErrorCode::kOutOfRange, "the prompt is longer than the backbone's context");
    CHORUS_TRY(check_kv_room(*pages_, Frames::kv_pages_for_stream(longest + limit, static_cast<int>(layouts.size()))));
    s->owner = this;
    s->width = static_cast<int>(layouts.size());  // a slot per guidance branch
    s->page_bytes = pages_->page_bytes();
    s->text_tokens_ = static_cast<int64_t>(parts.text.size());
    s->prompt_rows_ = s->rows[0].dim(0);
    bt::gpu::StreamSetup& st = s->setup;
    for (const Tensor& t : s->rows) st.branches.push_back(&t);
    st.guide = guide_of(g);
    st.backbone = g.backbone;
    st.depth = g.depth;
    st.max_frames = limit;
    st.min_frames = g.min_frames;
    st.seed = g.seed;
    st.rng_stream = g.rng_stream;
    st.act = g.act;
    return std::unique_ptr<TtsStream>(std::move(s));
  }

  // Any set of this engine's streams may be stepped together: streams of one activation precision
  // share frame pools that they join between frames (continuous batching), plain, CFG and dual-CFG
  // streams alike (a slot per branch).
  bool joins_running_batch() const override { return true; }

  Status step(std::span<TtsStream* const> streams, std::span<StepResult> out, StageTimes* times) const override {
    CHORUS_ASSIGN(const std::vector<CudaBreezeStream*> ss, own_streams<CudaBreezeStream>(streams, out, this));
    std::map<int, std::vector<size_t>> by_act;
    for (size_t i = 0; i < ss.size(); ++i) by_act[static_cast<int>(ss[i]->setup.act)].push_back(i);
    std::lock_guard<std::mutex> lock(pools_mu_);
    for (const auto& [k, idx] : by_act) {
      std::vector<CudaBreezeStream*> sub;
      for (size_t i : idx) sub.push_back(ss[i]);
      std::vector<StepResult> sub_out(sub.size());
      const bt::Activations act = sub[0]->setup.act;
      const auto need = [](const CudaBreezeStream& s) { return s.prompt_rows_longest + s.setup.max_frames; };
      const auto create = [&](int slots, int64_t positions) -> Result<std::unique_ptr<Frames>> {
        CHORUS_ASSIGN(slots, pool_slots_that_fit(slots));
        CHORUS_ASSIGN(auto frames, Frames::create_pool(dev_, slots, act, positions, pages_, batch_invariant_));
        frames->set_split_frames(split_frames_);
        return frames;
      };
      const auto admit = [&](Frames& fb, const std::vector<int>& slots, const std::vector<size_t>& which) -> Status {
        std::vector<bt::gpu::StreamSetup> setups;
        for (size_t i : which) setups.push_back(sub[i]->setup);
        CHORUS_TRY(fb.admit(slots, setups));
        for (size_t i : which) {
          sub[i]->setup.branches.clear();
          std::vector<Tensor>().swap(sub[i]->rows);
        }
        return ok_status();
      };
      DevicePools<Frames>& dp = pools_[k];
      dp.pages = pages_;
      dp.set_first_slots(first_pool_slots_);
      CHORUS_TRY(step_pooled_streams<Frames>(dp, sub, sub_out, static_cast<int32_t>(dev_->config().backbone_eos()),
                                             dev_->codebooks(), need, create, admit,
                                             [](const CudaBreezeStream& s) { return s.setup.max_frames; }, times));
      for (size_t j = 0; j < idx.size(); ++j) out[idx[j]] = std::move(sub_out[j]);
    }
    return ok_status();
  }

  const bt::gpu::DeviceModel& device_model() const { return *dev_; }

  // The page pool is thread-safe: no need for the pools' lock (a gauge may read it during a step).
  std::optional<nn::KvPageStats> kv_pages() const override { return pages_->stats(); }

 private:
  // A slot's own memory, its backbone caches being paged: its share of the sampler's and the depth
  // decoder's per-sequence buffers (~0.1 MiB at the real vocabularies, rounded up).
  Result<int> pool_slots_that_fit(int slots) const { return slots_that_fit(slots, 256.0 * 1024); }

  std::shared_ptr<const bt::gpu::DeviceModel> dev_;
  std::unique_ptr<bt::gpu::TextEncoderCuda> text_;  // the prompts' text segments
  std::shared_ptr<nn::gpu::KvPagePool> pages_;     // the backbone's KV pages, for every pool
  ThreadPool* pool_ = nullptr;
  bool split_frames_ = false;  // CudaLoadOptions::split_frames
  int first_pool_slots_ = 8;    // CudaLoadOptions::first_pool_slots
  bool batch_invariant_ = false;  // CudaLoadOptions::batch_invariant
  // The frame pools per activation precision: scheduling state, not part of the model.
  mutable std::mutex pools_mu_;
  mutable std::map<int, DevicePools<Frames>> pools_;
};

}  // namespace

Result<std::unique_ptr<TtsModel>> load_cuda_breeze_model(const std::string& dir, const CudaLoadOptions& options) {
  CHORUS_ASSIGN(auto e, CudaBreezeEngine::load(dir, options));
  return std::unique_ptr<TtsModel>(std::move(e));
}

}  // namespace chorus::engine

#else  // no CUDA in this build

namespace chorus::engine {

Result<std::unique_ptr<TtsModel>> load_cuda_breeze_model(const std::string&, const CudaLoadOptions&) {
  return make_error(ErrorCode::kUnsupported, "this chorus was built without CUDA");
}

}  // namespace chorus::engine

#endif
