#ifdef CHORUS_HAVE_CUDA

#include "runtime/cuda/frame_pipeline.h"

#include <cstdlib>
#include <cstring>

namespace chorus::cuda {

bool split_frame_graphs() {
  static const bool split = [] {
    const char* v = std::getenv("CHORUS_FRAME_GRAPH");
    return v && std::strcmp(v, "split") == 0;
  }();
  return split;
}

bool frames_ahead() {
  static const bool ahead = [] {
    const char* v = std::getenv("CHORUS_FRAME_AHEAD");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return ahead;
}

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
  return p;
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
