// Frames launched ahead of the host, for the device frame loops of every family
// (models/*/frame_batch_cuda.h).
//
// A frame loop writes each frame's results (codes, error flags) into one report buffer on the
// device; the frame's last kernel, publish(), copies that report into one of two pinned host
// buffers (the host memory is mapped, so it is a kernel's stores rather than a copy-engine
// operation, and stays inside the frame's graph after its last sampler). So frame n + 1 can already
// run on the GPU, and overwrite the device report, while the host still reads frame n's copy: the
// GPU does not idle while the host takes its turn between frames (a few microseconds per frame: the
// wake-up, the bookkeeping, the next launch).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <functional>

#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda {

// CHORUS_FRAME_GRAPH=split: the families capture a frame's two halves as two graphs, timed apart.
bool split_frame_graphs();
// CHORUS_FRAME_AHEAD=0: the engines wait for each frame before launching the next (for comparisons).
bool frames_ahead();

class FramePipeline {
 public:
  using Enqueue = std::function<Status()>;

  // `report`: the device report the frames write, `bytes` long (a multiple of 4).
  static Result<FramePipeline> create(const void* report, size_t bytes);

  // Enqueues the report's copy to the host buffer of the frame being launched: the last work of
  // every frame (captured into its graph, or enqueued after a prefill), exactly once per launch().
  Status publish(cudaStream_t s) const;
  // Enqueues one frame on `s`: `first`, then (when set) `second` behind an event that times the two
  // apart; the work must end with publish(). At most two frames may be in flight. `feed` is the
  // caller's note about the frame (whether it ends with the next frame's input).
  Status launch(cudaStream_t s, bool feed, const Enqueue& first, const Enqueue& second = {});
  // Waits for the oldest frame in flight; its report becomes report() and its times frame_ms().
  Status wait();

  int in_flight() const { return static_cast<int>(launched_ - waited_); }
  bool oldest_feed() const { return slots_[waited_ % 2].feed; }
  const void* report() const { return slots_[shown_].host.data(); }
  // Device milliseconds of the last waited frame: all of it, and its first part (0 without a second).
  float frame_ms() const { return frame_ms_; }
  float first_ms() const { return first_ms_; }

 private:
  struct Slot {
    PinnedBuffer host;
    Event start, seam, end;
    bool feed = false, seamed = false;
  };
  Slot slots_[2];
  // How many reports publish() has written (device memory): its parity picks the host buffer, so a
  // graph captured once alternates between the two; launch() numbers frames the same way.
  DeviceBuffer published_;
  const void* report_ = nullptr;
  size_t bytes_ = 0;
  int64_t launched_ = 0, waited_ = 0;
  int shown_ = 0;
  float frame_ms_ = 0, first_ms_ = 0;
};

}  // namespace chorus::cuda

#endif  // CHORUS_HAVE_CUDA
