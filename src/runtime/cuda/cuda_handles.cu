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

void release_device_block(Block b) {
  cudaFree(b.p);
  g_current.fetch_sub(b.n);
}
void release_pinned_block(Block b) { cudaFreeHost(b.p); }
void release_stream(cudaStream_t s) { cudaStreamDestroy(s); }
void release_event(cudaEvent_t e) { cudaEventDestroy(e); }
void release_graph_exec(cudaGraphExec_t g) { cudaGraphExecDestroy(g); }
void release_cublas(cublasHandle_t h) { cublasDestroy(h); }

Result<DeviceBuffer> DeviceBuffer::alloc(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return std::move(b);
  CHORUS_CUDA_TRY(cudaMalloc(&b.h_.p, bytes));
  b.h_.n = bytes;
  count_alloc(bytes);
  CHORUS_CUDA_TRY(cudaMemset(b.h_.p, 0, bytes));
  return std::move(b);
}

Result<PinnedBuffer> PinnedBuffer::alloc(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return std::move(b);
  CHORUS_CUDA_TRY(cudaMallocHost(&b.h_.p, bytes));
  b.h_.n = bytes;
  return std::move(b);
}

Result<Stream> Stream::create() {
  Stream s;
  CHORUS_CUDA_TRY(cudaStreamCreateWithFlags(&s.h_, cudaStreamNonBlocking));
  return std::move(s);
}
Status Stream::synchronize() const { return check(cudaStreamSynchronize(h_), "cudaStreamSynchronize"); }

Result<Event> Event::create() {
  Event e;
  CHORUS_CUDA_TRY(cudaEventCreate(&e.h_));
  return std::move(e);
}
Status Event::record(cudaStream_t s) const { return check(cudaEventRecord(h_, s), "cudaEventRecord"); }
Status Event::synchronize() const { return check(cudaEventSynchronize(h_), "cudaEventSynchronize"); }
Result<float> Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  CHORUS_CUDA_TRY(cudaEventElapsedTime(&ms, start.h_, h_));
  return ms;
}

Result<GraphExec> GraphExec::finish(cudaError_t end, cudaGraph_t graph) {
  if (end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    return check(end, "cudaStreamEndCapture").error();
  }
  GraphExec ge;
  const cudaError_t inst = cudaGraphInstantiate(&ge.h_, graph, 0);
  cudaGraphDestroy(graph);
  CHORUS_CUDA_TRY(inst);
  return std::move(ge);
}
Status GraphExec::launch(cudaStream_t s) const { return check(cudaGraphLaunch(h_, s), "cudaGraphLaunch"); }

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

Result<size_t> device_bytes_in_use() {
  size_t free_b = 0, total_b = 0;
  CHORUS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

}  // namespace chorus::cuda
