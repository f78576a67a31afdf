// Times one decode row's MLP at Breeze TTS 2's shapes (run on the GPU machine), three ways:
// cuda::linear's two launches (gate/up with SwiGLU, then down with the residual add), cuda::fused_mlp
// (one launch plus its reduction), and a plain read of the same bytes split into as many launches
// as the two-launch path has (the bandwidth a launch of that size gets). Each is captured for 16
// layers of distinct weights (so nothing stays in L2) in one CUDA graph with programmatic dependent
// launch, as the engine's frames are, and replayed; printed: µs per layer and TB/s.
//
// Build here, after `ninja -C build-cuda chorus` (the CUDA build's static libraries):
//   nvcc -DCHORUS_HAVE_CUDA=1 -Isrc -O3 -arch=sm_90 -std=c++20 --extended-lambda \
//     scripts/device/mlp_harness.cu -o .devcarry/probe/mlp_harness \
//     build-cuda/src/libchorus_cuda.a build-cuda/src/libchorus_runtime.a build-cuda/src/libchorus_core.a -lcublas
// then run .devcarry/probe/mlp_harness on the GPU machine (carry .devcarry/probe).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/cuda/device_util.cuh"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/ops.h"
#include "harness_util.h"

using namespace chorus;
using namespace chorus::cuda;
using chorus::harness::alloc;
using chorus::harness::must;

namespace {

constexpr int kLayers = 16;

// Deterministic small bf16 values (the timing does not depend on them).
__global__ void fill_kernel(uint16_t* w, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float f = (static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * 0.06f;
    w[i] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
  }
}

// A plain read of n16 16-byte chunks with the weights' load path (the floor for that many bytes).
__global__ void __launch_bounds__(256) read_kernel(const uint4* p, size_t n16, unsigned* sink) {
  const uint64_t pol = dev::weight_l2_policy();
  dev::pdl_wait();
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * 256;
  size_t i = blockIdx.x * size_t(256) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) v[c] = dev::load_weights(reinterpret_cast<const uint16_t*>(p + i + c * stride), pol);
#pragma unroll
    for (int c = 0; c < 4; ++c) acc ^= v[c].x ^ v[c].y ^ v[c].z ^ v[c].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = dev::load_weights(reinterpret_cast<const uint16_t*>(p + i), pol);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads
}

struct Layer {
  DeviceBuffer gate, up, down, down_t;
};

struct Shape {
  const char* name;
  int64_t hidden, inter;
};

template <class F>
double us_per_layer(cudaStream_t s, F&& enqueue_layers) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  must(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  enqueue_layers();
  must(cudaStreamEndCapture(s, &g), "end capture");
  must(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int i = 0; i < 3; ++i) must(cudaGraphLaunch(ge, s), "warm-up");
  cudaEvent_t a, b;
  must(cudaEventCreate(&a), "event");
  must(cudaEventCreate(&b), "event");
  const int reps = 20;
  must(cudaEventRecord(a, s), "record");
  for (int i = 0; i < reps; ++i) must(cudaGraphLaunch(ge, s), "replay");
  must(cudaEventRecord(b, s), "record");
  must(cudaEventSynchronize(b), "sync");
  float ms = 0;
  must(cudaEventElapsedTime(&ms, a, b), "elapsed");
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1000.0 / (reps * kLayers);
}

void run_shape(const Shape& sh, cudaStream_t s) {
  const int64_t H = sh.hidden, I = sh.inter;
  const size_t n = static_cast<size_t>(H * I), bytes = n * sizeof(uint16_t);
  std::vector<Layer> L(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    for (DeviceBuffer* b : {&L[l].gate, &L[l].up, &L[l].down, &L[l].down_t}) *b = alloc(bytes);
    fill_kernel<<<1024, 256, 0, s>>>(L[l].gate.as<uint16_t>(), n, 3 * l + 1);
    fill_kernel<<<1024, 256, 0, s>>>(L[l].up.as<uint16_t>(), n, 3 * l + 2);
    fill_kernel<<<1024, 256, 0, s>>>(L[l].down.as<uint16_t>(), n, 3 * l + 3);
    must(transpose_matrix({L[l].down.as<const uint16_t>(), H, I}, L[l].down_t.as<uint16_t>(), s), "transpose");
  }
  DeviceBuffer h = alloc(H * sizeof(float)), norm = alloc(H * sizeof(float)), act = alloc(I * sizeof(float));
  DeviceBuffer partial = alloc(fused_mlp_partial_floats(H) * sizeof(float)), sink = alloc(16);
  std::vector<float> hx(H), ones(H, 1.0f);
  for (int64_t i = 0; i < H; ++i) hx[i] = 0.8f * std::sin(0.37f * i);
  must(cudaMemcpy(h.data(), hx.data(), H * sizeof(float), cudaMemcpyHostToDevice), "copy");
  must(cudaMemcpy(norm.data(), ones.data(), H * sizeof(float), cudaMemcpyHostToDevice), "copy");
  must(cudaDeviceSynchronize(), "fill");

  const double mb = 3.0 * bytes / 1e6;
  auto report = [&](const char* what, double us) {
    std::printf("%-10s %-44s %8.2f us per layer  %5.2f TB/s\n", sh.name, what, us, mb / us);
  };
  report("gate/up + down (cuda::linear, 2 launches)", us_per_layer(s, [&] {
    for (const Layer& l : L) {
      LinearArgs g;
      g.x = h.as<float>();
      g.ldx = H;
      g.M = 1;
      g.norm_weight = norm.as<float>();
      g.out[0] = {{l.gate.as<const uint16_t>(), I, H}, nullptr, act.as<float>(), I};
      g.out[1] = {{l.up.as<const uint16_t>(), I, H}, nullptr, act.as<float>(), I};
      g.outputs = 2;
      g.epilogue = Epilogue::kSwiGlu;
      must(linear(g, nullptr, s, kLinearGemv), "gate/up");
      LinearArgs d;
      d.x = act.as<float>();
      d.ldx = I;
      d.M = 1;
      d.out[0] = {{l.down.as<const uint16_t>(), H, I}, nullptr, h.as<float>(), H};
      d.epilogue = Epilogue::kAdd;
      must(linear(d, nullptr, s, kLinearGemv), "down");
    }
  }));
  report("cuda::fused_mlp (1 launch + reduction)", us_per_layer(s, [&] {
    for (const Layer& l : L) {
      FusedMlpArgs m;
      m.h = h.as<float>();
      m.norm_weight = norm.as<float>();
      m.gate = {l.gate.as<const uint16_t>(), I, H};
      m.up = {l.up.as<const uint16_t>(), I, H};
      m.down_t = {l.down_t.as<const uint16_t>(), I, H};
      m.partial = partial.as<float>();
      must(fused_mlp(m, s), "fused_mlp");
    }
  }));
  report("plain read, 3 launches of one matrix", us_per_layer(s, [&] {
    for (const Layer& l : L)
      for (const DeviceBuffer* b : {&l.gate, &l.up, &l.down})
        must(launch(read_kernel, dim3(528), dim3(256), 0, s, b->as<const uint4>(), bytes / 16, sink.as<unsigned>()),
              "read");
  }));
}

}  // namespace

int main() {
  cudaStream_t s;
  must(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (const Shape& sh : {Shape{"depth", 1024, 8192}, Shape{"backbone", 2048, 6144}}) run_shape(sh, s);
  must(cudaDeviceSynchronize(), "end");
  return 0;
}
