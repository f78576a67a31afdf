// RAII owners of CUDA resources (device and pinned memory, streams, events, graphs, cuBLAS
// handles) and the conversion of CUDA error codes into chorus errors. Nothing here aborts: every
// failure comes back as a Status naming the call that failed.
//
// Device allocations go through DeviceBuffer, which keeps a process-wide count of the bytes it holds
// (current and peak), so benchmarks can report the memory chorus itself asked for.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/error.h"

typedef struct cublasContext* cublasHandle_t;

namespace chorus::cuda {

// ok, or an error naming `what` and the CUDA message (out of memory -> kResourceExhausted).
Status check(cudaError_t e, const char* what);

#define CHORUS_CUDA_TRY(expr) CHORUS_TRY(::chorus::cuda::check((expr), #expr))
// After a kernel launch: reports launch-configuration errors as a Status.
#define CHORUS_CUDA_LAUNCHED(name) CHORUS_TRY(::chorus::cuda::check(cudaGetLastError(), name))

struct MemoryStats {
  size_t current = 0;  // bytes held by DeviceBuffers now
  size_t peak = 0;     // most bytes held at once since start (or the last reset_peak)
};
MemoryStats memory_stats();
void reset_memory_peak();

// A move-only owner of one CUDA resource `H`, handed back by `Release` when the owner dies or is
// assigned over (release errors are dropped: nobody could act on them). Each resource type below
// is this owner plus its own creation and operations.
template <class H, void (*Release)(H)>
class Owned {
 public:
  Owned() = default;
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  H get() const { return h_; }

 protected:
  void reset() {
    if (h_) Release(std::exchange(h_, H{}));
  }
  H h_{};
};

// Memory blocks: the pointer and its size.
struct Block {
  void* p = nullptr;
  size_t n = 0;
  explicit operator bool() const { return p != nullptr; }
};
void release_device_block(Block b);
void release_pinned_block(Block b);

template <void (*Release)(Block)>
class OwnedMemory : public Owned<Block, Release> {
 public:
  void* data() const { return this->h_.p; }
  size_t bytes() const { return this->h_.n; }
  template <class T> T* as() const { return static_cast<T*>(this->h_.p); }
};

class DeviceBuffer : public OwnedMemory<release_device_block> {
 public:
  static Result<DeviceBuffer> alloc(size_t bytes);  // zero-filled
};

// Host memory the device can copy to and from asynchronously.
class PinnedBuffer : public OwnedMemory<release_pinned_block> {
 public:
  static Result<PinnedBuffer> alloc(size_t bytes);
};

void release_stream(cudaStream_t s);
class Stream : public Owned<cudaStream_t, release_stream> {
 public:
  static Result<Stream> create();
  Status synchronize() const;
};

void release_event(cudaEvent_t e);
class Event : public Owned<cudaEvent_t, release_event> {
 public:
  static Result<Event> create();
  Status record(cudaStream_t s) const;
  Status synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  Result<float> elapsed_ms_since(const Event& start) const;
};

// An instantiated CUDA graph, made by capturing the work a callable enqueues on a stream.
void release_graph_exec(cudaGraphExec_t g);
class GraphExec : public Owned<cudaGraphExec_t, release_graph_exec> {
 public:
  template <class F>
  static Result<GraphExec> capture(cudaStream_t s, F&& enqueue) {
    CHORUS_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    Status st = enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (!st.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return std::move(st).error();
    }
    return finish(end, graph);
  }
  bool valid() const { return h_ != nullptr; }
  Status launch(cudaStream_t s) const;

 private:
  static Result<GraphExec> finish(cudaError_t end, cudaGraph_t graph);
};

void release_cublas(cublasHandle_t h);
class Cublas : public Owned<cublasHandle_t, release_cublas> {
 public:
  static Result<Cublas> create();
};

// Bytes in use on the device as the driver reports it (all processes, CUDA context included).
Result<size_t> device_bytes_in_use();

}  // namespace chorus::cuda
