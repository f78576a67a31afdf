#ifdef CHORUS_HAVE_CUDA

#include "runtime/cuda/frame_pipeline.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/cuda/launch.cuh"

namespace chorus::cuda {

namespace {

__global__ void publish_kernel(const int32_t* report, int words, int32_t* host0, int32_t* host1, uint32_t* published) {
  dev::pdl_wait();
  const uint32_t n = *published;
  int32_t* dst = (n & 1u) ? host1 : host0;
  for (int i = threadIdx.x; i < words; i += blockDim.x) dst[i] = report[i];
  __syncthreads();  // every thread has read the count before it moves on
  if (threadIdx.x == 0) *published = n + 1;
}

}  // namespace

bool split_frame_graphs() {
  static const bool split = [] {
    const char* v = std::getenv("CHORUS_FRAME_GRAPH");
    return v && std::strcmp(v, "split") == 0;
  }();
  return split;
}

bool frames_ahead() {
  static EnvSwitch ahead("CHORUS_FRAME_AHEAD");
  return ahead.on();
}

Result<FramePipeline> FramePipeline::create(const void* report, size_t bytes) {
  if (!report || bytes == 0 || bytes % 4 != 0) return make_error(ErrorCode::kInternal, "frame pipeline: no report");
  FramePipeline p;
  p.split_halves_ = split_frame_graphs();
  CHORUS_ASSIGN(p.published_, DeviceBuffer::alloc(sizeof(uint32_t)));
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

Status FramePipeline::publish(cudaStream_t s) const {
  // Pinned memory is mapped into the device's address space (unified addressing), so the kernel
  // stores into it directly.
  CHORUS_CUDA_TRY(cuda::launch(publish_kernel, dim3(1), dim3(128), 0, s, static_cast<const int32_t*>(report_),
                               static_cast<int>(bytes_ / 4), slots_[0].host.as<int32_t>(), slots_[1].host.as<int32_t>(),
                               published_.as<uint32_t>()));
  return ok_status();
}

Status FramePipeline::publish_and_wait(cudaStream_t s) {
  CHORUS_TRY(launch(s, true, [&] { return publish(s); }));
  return wait();
}

Status FramePipeline::launch_frame(cudaStream_t s, bool feed, const Enqueue& first_half, const Enqueue& second_half) {
  // Capture only records, so a frame may be in flight meanwhile.
  const auto capture = [&](GraphExec& g, bool first, bool second, bool publishes) -> Status {
    if (g.valid()) return ok_status();
    CHORUS_ASSIGN(g, GraphExec::capture(s, [&]() -> Status {
      if (first) CHORUS_TRY(first_half());
      if (second) CHORUS_TRY(second_half());
      return publishes ? publish(s) : ok_status();
    }));
    return ok_status();
  };
  if (!feed) {
    CHORUS_TRY(capture(last_, true, false, true));
    return launch(s, feed, [&] { return last_.launch(s); });
  }
  if (!split_halves_) {
    CHORUS_TRY(capture(whole_, true, true, true));
    return launch(s, feed, [&] { return whole_.launch(s); });
  }
  CHORUS_TRY(capture(first_, true, false, false));
  CHORUS_TRY(capture(second_, false, true, true));
  return launch(s, feed, [&] { return first_.launch(s); }, [&] { return second_.launch(s); });
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

Status FramePipeline::launch(cudaStream_t s, bool feed, const Enqueue& first, const Enqueue& second) {
  if (in_flight() >= 2) return make_error(ErrorCode::kInternal, "frame pipeline: a third frame in flight");
  // The slot of the frame two launches back: the host is done with its report (waited and read).
  // publish() picks the same one on the device (its count of reports has this parity).
  Slot& slot = slots_[launched_ % 2];
  slot.feed = feed;
  slot.seamed = static_cast<bool>(second);
  CHORUS_TRY(slot.start.record(s));
  CHORUS_TRY(first());
  if (second) {
    CHORUS_TRY(slot.seam.record(s));
    CHORUS_TRY(second());
  }
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
