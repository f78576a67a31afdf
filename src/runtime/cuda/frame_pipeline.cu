#ifdef CHORUS_HAVE_CUDA

#include "runtime/cuda/frame_pipeline.h"

#include <cstring>
#include <utility>

namespace chorus::cuda {

Result<FramePipeline> FramePipeline::create(const void* report, size_t bytes) {
  if (!report || bytes == 0) return make_error(ErrorCode::kInternal, "frame pipeline: no report");
  FramePipeline p;
  p.report_ = report;
  p.bytes_ = bytes;
  for (Slot& s : p.slots_) {
    CHORUS_ASSIGN(s.host, PinnedBuffer::alloc(bytes));
    std::memset(s.host.data(), 0, bytes);
    CHORUS_ASSIGN(s.start, Event::create());
    CHORUS_ASSIGN(s.seam, Event::create());
    CHORUS_ASSIGN(s.end, Event::create());
  }
  return std::move(p);
}

Status FramePipeline::publish_and_wait(cudaStream_t s) {
  CHORUS_TRY(launch(s, true, [] { return ok_status(); }));
  return wait();
}

Status FramePipeline::launch_frame(cudaStream_t s, bool feed, const Enqueue& first_half, const Enqueue& second_half) {
  // Capture only records, so a frame may be in flight meanwhile.
  const auto capture = [&](GraphExec& g, bool first, bool second) -> Status {
    if (g.valid()) return ok_status();
    CHORUS_ASSIGN(g, GraphExec::capture(s, [&]() -> Status {
      if (first) CHORUS_TRY(first_half());
      return second ? second_half() : ok_status();
    }));
    ++captured_;
    return ok_status();
  };
  Graphs& g = graphs_[key_];
  if (!feed) {  // the first half alone
    CHORUS_TRY(capture(g.first, true, false));
    return launch(s, feed, [&] { return g.first.launch(s); });
  }
  if (!split_halves_) {
    CHORUS_TRY(capture(g.whole, true, true));
    return launch(s, feed, [&] { return g.whole.launch(s); });
  }
  CHORUS_TRY(capture(g.first, true, false));
  CHORUS_TRY(capture(g.second, false, true));
  return launch(s, feed, [&] { return g.first.launch(s); }, [&] { return g.second.launch(s); });
}

Status FramePipeline::run_frame(cudaStream_t s, bool feed, std::optional<bool> then, const Enqueue& first_half,
                                const Enqueue& second_half) {
  if (in_flight() == 0) {
    CHORUS_TRY(launch_frame(s, feed, first_half, second_half));
  } else if (feed && !slots_[waited_ % 2].feed) {
    return make_error(ErrorCode::kInternal, "frame pipeline: the frame launched ahead has no second half");
  }
  if (then) CHORUS_TRY(launch_frame(s, *then, first_half, second_half));
  return wait();
}

Status FramePipeline::launch_ahead(cudaStream_t s, bool feed, const Enqueue& first_half, const Enqueue& second_half) {
  if (in_flight() > 0) return make_error(ErrorCode::kInternal, "frame pipeline: a frame launched ahead of another");
  return launch_frame(s, feed, first_half, second_half);
}

Status FramePipeline::launch(cudaStream_t s, bool feed, const Enqueue& first, const Enqueue& second) {
  if (in_flight() >= 2) return make_error(ErrorCode::kInternal, "frame pipeline: a third frame in flight");
  // The slot of the frame two launches back: the host is done with its report (waited and read).
  Slot& slot = slots_[launched_ % 2];
  slot.feed = feed;
  slot.seamed = static_cast<bool>(second);
  CHORUS_TRY(slot.start.record(s));
  CHORUS_TRY(first());
  if (second) {
    CHORUS_TRY(slot.seam.record(s));
    CHORUS_TRY(second());
  }
  CHORUS_CUDA_TRY(cudaMemcpyAsync(slot.host.data(), report_, bytes_, cudaMemcpyDeviceToHost, s));
  CHORUS_TRY(slot.end.record(s));
  ++launched_;
  return ok_status();
}

Status FramePipeline::wait() {
  if (in_flight() == 0) return make_error(ErrorCode::kInternal, "frame pipeline: no frame in flight");
  const int i = static_cast<int>(waited_ % 2);
  const Slot& slot = slots_[i];
  CHORUS_TRY(slot.end.synchronize());
  ++waited_;
  shown_ = i;
  CHORUS_ASSIGN(frame_ms_, slot.end.elapsed_ms_since(slot.start));
  first_ms_ = 0;
  if (slot.seamed) {
    CHORUS_ASSIGN(first_ms_, slot.seam.elapsed_ms_since(slot.start));
  }
  return ok_status();
}

}  // namespace chorus::cuda

#endif  // CHORUS_HAVE_CUDA
