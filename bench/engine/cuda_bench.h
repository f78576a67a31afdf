// `chorus bench --device cuda`, for every family: single-stream per-frame costs (the two stages'
// device times apart with split_frames), the codec per frame on the GPU and on the CPU, time to
// first frame and to first audio, peak GPU memory (and the weights' share, which --weights int8 /
// fp8 shrinks), then the step time and aggregate real-time streams for each batch size. The family only supplies its requests (requests.h). Declared in
// every build; without CUDA it returns kUnsupported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/engine/requests.h"
#include "core/error.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::bench {

struct CudaBenchOptions {
  std::string model;
  int64_t frames = 250;
  int64_t warmup = 5;
  std::vector<int64_t> batches = {1};
  int64_t batch_frames = 100;  // frames per stream in the batch runs
  bool split_frames = false;   // engine::CudaLoadOptions::split_frames
  bool stack_trace = false;    // the persistent decode kernel's per-phase times (cuda::decode_stack_enable_trace)
  bool batch_invariant = false;  // engine::LoadOptions::batch_invariant
  // The decoder layers' weights on the GPU: bf16 as stored, int8 or fp8 (engine::CudaLoadOptions).
  cpu::WeightFormat weights = cpu::WeightFormat::kBf16;
};

Result<std::string> cuda_bench(const CudaBenchOptions& o, const RequestShape& shape);

}  // namespace chorus::bench
