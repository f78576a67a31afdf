#include "runtime/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>

namespace chorus::cuda {

Result<std::string> device_summary(int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return make_error(ErrorCode::kUnsupported, std::string("CUDA: ") + cudaGetErrorString(err));
  if (device < 0 || device >= count)
    return make_error(ErrorCode::kNotFound, "CUDA device " + std::to_string(device) + " does not exist");
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, device);
  if (err != cudaSuccess) return make_error(ErrorCode::kInternal, std::string("CUDA: ") + cudaGetErrorString(err));
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return std::string(buf);
}

int sm_count() {
  static std::atomic<int> cached[16] = {};
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  const bool cacheable = dev >= 0 && dev < 16;
  if (cacheable && cached[dev].load(std::memory_order_relaxed) > 0) return cached[dev].load(std::memory_order_relaxed);
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return 132;
  if (cacheable) cached[dev].store(sms, std::memory_order_relaxed);
  return sms;
}

}  // namespace chorus::cuda
