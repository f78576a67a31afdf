// What the GPU engines of every family share (Qwen3-TTS, Breeze TTS 2): streams whose frames run in
// one device frame batch, and the per-step bookkeeping around it. `Frames` is a family's FrameBatch,
// a recipe of the frame core (models/frame_core/frame_core_cuda.h).
// Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "engine/tts_model.h"
#include "runtime/cuda/ops.h"

namespace chorus::engine {

template <class Frames>
struct DeviceBatch {
  std::unique_ptr<Frames> frames;
  int unfinished = 0;
};

// A stream's place in its batch (none before its first step) and where it stands.
template <class Frames>
class DeviceStream : public TtsStream {
 public:
  bool finished() const override { return reason != StopReason::kRunning; }
  StopReason stop_reason() const override { return reason; }
  int64_t frames() const override { return made; }
  void cancel() override { finish(StopReason::kCancelled); }

  void finish(StopReason r) {
    if (reason != StopReason::kRunning) return;
    reason = r;
    if (batch) --batch->unfinished;
  }
  // This stream's share of its batch's device memory, or `before` when it has no batch yet.
  size_t batch_share_bytes(size_t before) const {
    return batch ? batch->frames->device_bytes() / static_cast<size_t>(batch->frames->size()) : before;
  }

  const void* owner = nullptr;
  int64_t made = 0;
  StopReason reason = StopReason::kRunning;
  std::shared_ptr<DeviceBatch<Frames>> batch;
  int slot = -1;
};

// The device sampler's error flag of one slot as a Status.
inline Status sampler_status(int32_t flag) {
  if (flag == cuda::kSampleNonFinite) return make_error(ErrorCode::kInternal, "sampler: the model produced a non-finite logit");
  if (flag == cuda::kSampleAllMasked) return make_error(ErrorCode::kInternal, "sampler: every id is masked");
  return ok_status();
}

// The streams of `streams` that belong to `owner`, or an error naming the one that does not.
template <class S>
Result<std::vector<S*>> own_streams(std::span<TtsStream* const> streams, std::span<StepResult> out, const void* owner) {
  if (out.size() != streams.size()) return make_error(ErrorCode::kInternal, "step: one result per stream");
  std::vector<S*> ss;
  for (TtsStream* t : streams) {
    auto* c = dynamic_cast<S*>(t);
    if (!c || c->owner != owner) return make_error(ErrorCode::kInvalidArgument, "step: a stream of another model");
    ss.push_back(c);
  }
  for (StepResult& o : out) {
    o.has_frame = false;
    o.codes.clear();
  }
  return ss;
}

// One step of `ss` (this engine's streams). On their first step the unfinished streams form a new
// batch: `start(active)` creates it and runs the prefill, after which a slot whose next codebook 0
// is `eos` stops. Later steps must pass every unfinished stream of that one batch. Then one frame
// for the batch, its codes into `out`, and the stop rules (frame limit `max_frames(s)`, EOS).
// Returns the batch that ran (for its timings), or nullptr when no frame was due.
template <class Frames, class S, class Start, class MaxFrames>
Result<Frames*> step_device_streams(const std::vector<S*>& ss, std::span<StepResult> out, int32_t eos, int codebooks,
                                    Start&& start, MaxFrames&& max_frames) {
  std::vector<size_t> active;
  for (size_t i = 0; i < ss.size(); ++i)
    if (!ss[i]->finished()) active.push_back(i);
  if (active.empty()) return static_cast<Frames*>(nullptr);

  std::shared_ptr<DeviceBatch<Frames>> batch = ss[active[0]]->batch;
  if (!batch) {
    for (size_t i : active)
      if (ss[i]->batch) return make_error(ErrorCode::kUnsupported, "cuda step: new streams mixed with a running batch");
    batch = std::make_shared<DeviceBatch<Frames>>();
    CHORUS_ASSIGN(batch->frames, start(active));
    batch->unfinished = static_cast<int>(active.size());
    for (size_t a = 0; a < active.size(); ++a) {
      S& s = *ss[active[a]];
      s.batch = batch;
      s.slot = static_cast<int>(a);
      CHORUS_TRY(sampler_status(batch->frames->error(s.slot)));
      if (batch->frames->next_c0(s.slot) == eos) s.finish(StopReason::kEos);
    }
  } else {
    for (size_t i : active)
      if (ss[i]->batch != batch) return make_error(ErrorCode::kUnsupported, "cuda step: streams of different batches");
    if (static_cast<int>(active.size()) != batch->unfinished)
      return make_error(ErrorCode::kUnsupported, "cuda step: every unfinished stream of a batch must be stepped together");
  }

  // feed: some stream may want a frame after this one; feed_after: after that one too. The frame
  // after this one is launched ahead of the wait when it may be due (cuda::FramePipeline).
  bool any = false, feed = false, feed_after = false;
  for (size_t i : active) {
    if (ss[i]->finished()) continue;
    any = true;
    feed = feed || ss[i]->made + 1 < max_frames(*ss[i]);
    feed_after = feed_after || ss[i]->made + 2 < max_frames(*ss[i]);
  }
  if (!any) return static_cast<Frames*>(nullptr);
  Frames& fb = *batch->frames;
  CHORUS_TRY(fb.run_frame(feed, feed ? std::optional<bool>(feed_after) : std::nullopt));
  for (size_t i : active) {
    S& s = *ss[i];
    if (s.finished()) continue;
    CHORUS_TRY(sampler_status(fb.error(s.slot)));
    const int32_t* c = fb.frame_codes(s.slot);
    out[i].has_frame = true;
    out[i].codes.assign(c, c + codebooks);
    s.made += 1;
    if (s.made >= max_frames(s)) s.finish(StopReason::kMaxFrames);
    else if (fb.next_c0(s.slot) == eos) s.finish(StopReason::kEos);
  }
  return &fb;
}

// step_device_streams, with the batch's device times added to `times` (when given): the prefill's
// when `start` made a batch, the halves' when a frame ran.
template <class Frames, class S, class Start, class MaxFrames>
Status step_timed(const std::vector<S*>& ss, std::span<StepResult> out, int32_t eos, int codebooks, Start&& start,
                  MaxFrames&& max_frames, StageTimes* times) {
  const auto timed_start = [&](const std::vector<size_t>& active) -> Result<std::unique_ptr<Frames>> {
    CHORUS_ASSIGN(std::unique_ptr<Frames> frames, start(active));
    if (times) times->prefill_s += frames->timing().prefill_ms * 1e-3;
    return frames;
  };
  CHORUS_ASSIGN(Frames* ran, step_device_streams<Frames>(ss, out, eos, codebooks, timed_start, max_frames));
  if (ran && times) {
    times->depth_s += ran->timing().depth_ms * 1e-3;
    times->backbone_s += ran->timing().backbone_ms * 1e-3;
  }
  return ok_status();
}

// The parts of a GPU engine that every family shares: its CPU engine (request handling, voices),
// which outlives the device model (a base's members are destroyed after the derived class's).
template <class CpuEngine>
class DeviceEngine : public TtsModel {
 public:
  const ModelInfo& info() const override { return info_; }
  const VoiceCloner* voice_cloner() const override { return cpu_->voice_cloner(); }
  bool joins_running_batch() const override { return false; }

 protected:
  std::unique_ptr<CpuEngine> cpu_;
  ModelInfo info_;
};

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
