// A CUPTI injection library that records every kernel's GPU start and end (graph nodes included)
// and writes them as CSV when the process exits: a kernel timeline where Nsight Systems is not
// installed (the device machine has Nsight Compute only). The CSV has the columns that
// scripts/device/timeline.py reads ("Start (ns)", "Duration (ns)", "GrdX", "Name"), and the grid's
// y and z ("GrdY", "GrdZ": the codec GEMM's row tiles and chunk groups, so its shapes can be read).
//
// Build (here, against the CUDA toolkit's CUPTI):
//   g++ -O2 -shared -fPIC -I/usr/local/cuda/include scripts/device/kernel_trace.cpp \
//       -L/usr/local/cuda/lib64 -lcupti -o .devcarry/s15/libkernel_trace.so
// Use: CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so KERNEL_TRACE_OUT=/tmp/k.csv chorus bench ...
// (libcupti.so.13 on LD_LIBRARY_PATH). Concurrent-kernel records do not serialize the launches.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end;
  int grid, grid_y, grid_z;
  std::string name;
};

std::mutex g_mutex;
std::vector<KernelRecord> g_records;
constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRecord> batch;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    batch.push_back({k->start, k->end, k->gridX, k->gridY, k->gridZ, demangled(k->name)});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& r : batch) g_records.push_back(std::move(r));
}

void write_records() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("KERNEL_TRACE_OUT");
  FILE* f = std::fopen(path ? path : "/tmp/kernel_trace.csv", "w");
  if (!f) return;
  std::fprintf(f, "Start (ns),Duration (ns),GrdX,GrdY,GrdZ,Name\n");
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const KernelRecord& r : g_records) {
    std::string quoted;
    for (char c : r.name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    std::fprintf(f, "%llu,%llu,%d,%d,%d,\"%s\"\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end - r.start), r.grid, r.grid_y, r.grid_z, quoted.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels\n", g_records.size());
}

}  // namespace

extern "C" int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI would not start\n");
    return 0;
  }
  std::atexit(write_records);
  return 1;
}
