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

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> alloc(size_t bytes);  // zero-filled
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return p_; }
  size_t bytes() const { return n_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Host memory the device can copy to and from asynchronously.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static Result<PinnedBuffer> alloc(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return p_; }
  size_t bytes() const { return n_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

class Stream {
 public:
  Stream() = default;
  static Result<Stream> create();
  ~Stream();
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  Status synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() = default;
  static Result<Event> create();
  ~Event();
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  Status record(cudaStream_t s) const;
  Status synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  Result<float> elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

// An instantiated CUDA graph, made by capturing the work a callable enqueues on a stream.
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec();
  GraphExec(GraphExec&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

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
  bool valid() const { return g_ != nullptr; }
  Status launch(cudaStream_t s) const;

 private:
  static Result<GraphExec> finish(cudaError_t end, cudaGraph_t graph);
  cudaGraphExec_t g_ = nullptr;
};

class Cublas {
 public:
  Cublas() = default;
  static Result<Cublas> create();
  ~Cublas();
  Cublas(Cublas&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Cublas& operator=(Cublas&& o) noexcept;
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// Bytes in use on the device as the driver reports it (all processes, CUDA context included).
Result<size_t> device_bytes_in_use();

}  // namespace chorus::cuda
