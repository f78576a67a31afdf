#include "runtime/cuda/cuda_handles.h"

#include <cublas_v2.h>

#include <atomic>

namespace chorus::cuda {

namespace {
std::atomic<size_t> g_current{0}, g_peak{0};

void count_alloc(size_t n) {
  const size_t now = g_current.fetch_add(n) + n;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  const ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted
                         : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? ErrorCode::kUnsupported
                                                                                       : ErrorCode::kInternal;
  return make_error(code, std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

MemoryStats memory_stats() { return {g_current.load(), g_peak.load()}; }
void reset_memory_peak() { g_peak.store(g_current.load()); }

Result<DeviceBuffer> DeviceBuffer::alloc(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return std::move(b);
  CHORUS_CUDA_TRY(cudaMalloc(&b.p_, bytes));
  b.n_ = bytes;
  count_alloc(bytes);
  CHORUS_CUDA_TRY(cudaMemset(b.p_, 0, bytes));
  return std::move(b);
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) {
    cudaFree(p_);
    g_current.fetch_sub(n_);
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer tmp(std::move(*this));
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

Result<PinnedBuffer> PinnedBuffer::alloc(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return std::move(b);
  CHORUS_CUDA_TRY(cudaMallocHost(&b.p_, bytes));
  b.n_ = bytes;
  return std::move(b);
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    PinnedBuffer tmp(std::move(*this));
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

Result<Stream> Stream::create() {
  Stream s;
  CHORUS_CUDA_TRY(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
  return std::move(s);
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Stream tmp(std::move(*this));
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}
Status Stream::synchronize() const { return check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

Result<Event> Event::create() {
  Event e;
  CHORUS_CUDA_TRY(cudaEventCreate(&e.e_));
  return std::move(e);
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    Event tmp(std::move(*this));
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}
Status Event::record(cudaStream_t s) const { return check(cudaEventRecord(e_, s), "cudaEventRecord"); }
Status Event::synchronize() const { return check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
Result<float> Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  CHORUS_CUDA_TRY(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

GraphExec::~GraphExec() {
  if (g_) cudaGraphExecDestroy(g_);
}
GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    GraphExec tmp(std::move(*this));
    g_ = std::exchange(o.g_, nullptr);
  }
  return *this;
}
Result<GraphExec> GraphExec::finish(cudaError_t end, cudaGraph_t graph) {
  if (end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    return check(end, "cudaStreamEndCapture").error();
  }
  GraphExec ge;
  const cudaError_t inst = cudaGraphInstantiate(&ge.g_, graph, 0);
  cudaGraphDestroy(graph);
  CHORUS_CUDA_TRY(inst);
  return std::move(ge);
}
Status GraphExec::launch(cudaStream_t s) const { return check(cudaGraphLaunch(g_, s), "cudaGraphLaunch"); }

namespace {
Status cublas_check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return ok_status();
  return make_error(st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                    std::string("cuBLAS: ") + what + " failed (status " + std::to_string(static_cast<int>(st)) + ")");
}
}  // namespace

Result<Cublas> Cublas::create() {
  Cublas c;
  CHORUS_TRY(cublas_check(cublasCreate(&c.h_), "cublasCreate"));
  return std::move(c);
}
Cublas::~Cublas() {
  if (h_) cublasDestroy(h_);
}
Cublas& Cublas::operator=(Cublas&& o) noexcept {
  if (this != &o) {
    Cublas tmp(std::move(*this));
    h_ = std::exchange(o.h_, nullptr);
  }
  return *this;
}

Result<size_t> device_bytes_in_use() {
  size_t free_b = 0, total_b = 0;
  CHORUS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

}  // namespace chorus::cuda
