// Frames launched ahead of the host, for the device frame loops of every family
// (models/*/frame_batch_cuda.h).
//
// A frame loop writes each frame's results (codes, error flags) into one report buffer on the
// device. The pipeline copies that report after the frame into one of two pinned host buffers, so
// frame n + 1 can already run on the GPU, and overwrite the device report, while the host still
// reads frame n's copy: the GPU does not idle while the host takes its turn between frames (a few
// microseconds per frame: the wake-up, the bookkeeping, the next launch). A copy, because a kernel
// storing the report into mapped host memory at the end of the frame's graph measured 0.03 ms per
// frame slower on the H200.
//
// A frame launched ahead is speculative: when the frame before it ends every stream (EOS), its
// results are simply never read. Frames may be launched ahead only because a frame's inputs live on
// the device (the sampled codes feed the next frame there).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda {

class FramePipeline {
 public:
  using Enqueue = std::function<Status()>;

  // `report`: the device report the frames write, `bytes` long.
  static Result<FramePipeline> create(const void* report, size_t bytes);

  // The report of work already enqueued on `s` (a prefill): copied, waited for, then report().
  Status publish_and_wait(cudaStream_t s);

  // One frame of a loop whose frame is two halves: `first_half` (the depth walk), then, with feed,
  // `second_half` (the backbone step that samples the next frame's first code). Launches it as one
  // graph (as two with split_halves, to time them apart; the first half alone without feed), unless
  // it was launched ahead by the previous call; with `then`, launches the following frame (feed =
  // *then) before waiting for this one. Graphs are captured at first use and replayed, so the
  // enqueues must depend only on device state. Then report() is this frame's.
  Status run_frame(cudaStream_t s, bool feed, std::optional<bool> then, const Enqueue& first_half,
                   const Enqueue& second_half);
  // Launches the next frame (as run_frame would) with none in flight, without waiting for it: the
  // next run_frame waits for it instead of launching. For work the host does on the device between
  // two frames (a prefill) that the next frame must follow.
  Status launch_ahead(cudaStream_t s, bool feed, const Enqueue& first_half, const Enqueue& second_half);
  void set_split_halves(bool split) { split_halves_ = split; }
  // Frames whose enqueues differ (a batch that computes a different number of rows) keep their own
  // graphs: `key` picks the set that later launches capture and replay.
  void set_graph_key(int key) { key_ = key; }
  // Whether a frame was launched ahead and not yet waited for (its report not yet read).
  bool frame_ahead() const { return in_flight() > 0; }
  // Launches so far (frames and published prefills) and how many of them have been waited for:
  // work launched before a moment counted by launched() is done once waited() reaches it.
  int64_t launched() const { return launched_; }
  int64_t waited() const { return waited_; }
  // Graphs captured so far: a capture costs the host milliseconds, so a step that captures is slow.
  int64_t graphs_captured() const { return captured_; }
  // Waits for every frame in flight, whose reports nobody will read (their streams are gone).
  Status settle() {
    while (in_flight() > 0) {
      CHORUS_TRY(wait());
    }
    return ok_status();
  }

  const void* report() const { return slots_[shown_].host.data(); }
  // Device milliseconds of the last waited frame's halves; the second is 0 when the frame ran as one
  // graph (its time is inside the first's) or without feed.
  float first_half_ms() const { return first_ms_ > 0 ? first_ms_ : frame_ms_; }
  float second_half_ms() const { return first_ms_ > 0 ? frame_ms_ - first_ms_ : 0.0f; }

 private:
  Status launch_frame(cudaStream_t s, bool feed, const Enqueue& first_half, const Enqueue& second_half);
  // Enqueues one frame on `s`: `first`, then (when set) `second` behind an event that times the two
  // apart, then the report's copy. At most two frames may be in flight.
  Status launch(cudaStream_t s, bool feed, const Enqueue& first, const Enqueue& second = {});
  // Waits for the oldest frame in flight; its report becomes report() and its times the halves'.
  Status wait();
  int in_flight() const { return static_cast<int>(launched_ - waited_); }

  struct Slot {
    PinnedBuffer host;
    Event start, seam, end;
    bool feed = false, seamed = false;
  };
  Slot slots_[2];
  struct Graphs {
    GraphExec whole, first, second;  // a frame; its halves (the first alone: the last frame)
  };
  std::map<int, Graphs> graphs_;
  int key_ = 0;
  bool split_halves_ = false;
  const void* report_ = nullptr;
  size_t bytes_ = 0;
  int64_t launched_ = 0, waited_ = 0, captured_ = 0;
  int shown_ = 0;
  float frame_ms_ = 0, first_ms_ = 0;
};

}  // namespace chorus::cuda

#endif  // CHORUS_HAVE_CUDA
