// Helpers of the GPU suite (built only with CUDA, run only on the GPU machine): host ↔ device
// copies, seeded random data, bf16 matrices with the exact values both backends see.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/ops.h"

namespace chorus::gpu_test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU()                       \
  do {                                      \
    if (!::chorus::gpu_test::have_gpu()) {  \
      GTEST_SKIP() << "no CUDA device";     \
    }                                       \
  } while (0)

template <class T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  auto b = cuda::DeviceBuffer::alloc(std::max<size_t>(16, v.size() * sizeof(T)));
  EXPECT_TRUE(b.ok()) << b.error().to_string();
  if (!b.ok()) return {};
  if (!v.empty()) {
    EXPECT_EQ(cudaMemcpy(b->data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return std::move(b).value();
}

template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(v.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Device buffer of n floats filled with NaN, so an unwritten output fails the comparison.
inline cuda::DeviceBuffer poisoned(size_t n) {
  return to_device(std::vector<float>(n, std::nanf("")));
}

inline std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A [rows, cols] bf16 matrix on host and device.
struct Bf16Matrix {
  std::vector<uint16_t> host;
  cuda::DeviceBuffer dev;
  int64_t rows = 0, cols = 0;
  cpu::MatrixRef cpu() const { return {DType::kBF16, host.data(), rows, cols}; }
  cuda::DeviceMatrix gpu() const { return {dev.as<const uint16_t>(), rows, cols}; }
};

inline Bf16Matrix random_bf16(std::mt19937& rng, int64_t rows, int64_t cols, float scale) {
  Bf16Matrix m;
  m.rows = rows;
  m.cols = cols;
  std::normal_distribution<float> d(0.0f, scale);
  m.host.resize(static_cast<size_t>(rows * cols));
  for (auto& h : m.host) h = f32_to_bf16(d(rng));
  m.dev = to_device(m.host);
  return m;
}

// max |a − b| / (max |b| + tiny); NaN anywhere gives +inf.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / den;
}

}  // namespace chorus::gpu_test
