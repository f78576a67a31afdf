// Shared helpers for the CPU kernel tests: seeded random data, weight matrices in every storage
// dtype together with the exact values the kernel sees, an ISA-parametrised fixture, and the
// comparison against naive double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "runtime/cpu/kernels.h"

namespace chorus::cpu::test {

inline constexpr double kU = 5.9604644775390625e-8;  // unit roundoff of f32, 2^-24

inline std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A [rows, cols] matrix stored in `dtype`, and the exact (dequantised) value of each element.
struct TestMatrix {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t> half;  // bf16 / f16 storage
  std::vector<float> full;     // f32 storage
  std::vector<double> values;

  MatrixRef ref() const {
    return MatrixRef{dtype, dtype == DType::kF32 ? static_cast<const void*>(full.data()) : half.data(),
                     rows, cols};
  }
  double at(int64_t r, int64_t c) const { return values[r * cols + c]; }
};

inline TestMatrix random_matrix(DType dt, int64_t rows, int64_t cols, std::mt19937& rng,
                                float scale = 1.0f) {
  TestMatrix m;
  m.dtype = dt;
  m.rows = rows;
  m.cols = cols;
  const auto src = random_vec(rng, static_cast<size_t>(rows * cols), -scale, scale);
  m.values.resize(src.size());
  if (dt == DType::kF32) {
    m.full = src;
    for (size_t i = 0; i < src.size(); ++i) m.values[i] = src[i];
  } else {
    m.half.resize(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      m.half[i] = dt == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      m.values[i] = dt == DType::kBF16 ? bf16_to_f32(m.half[i]) : f16_to_f32(m.half[i]);
    }
  }
  return m;
}

inline const char* isa_label(Isa isa) {
  return isa == Isa::kAvx512Vnni ? "AVX-512 VNNI"
         : isa == Isa::kAvx512   ? "AVX-512 F/BW/VL/DQ"
         : isa == Isa::kAvx2     ? "AVX2/FMA/F16C"
                                 : "nothing";
}

// Runs each test once per ISA (the AVX2 / AVX-512 instances are skipped on CPUs without them).
class IsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    saved_ = active_isa();
    if (!set_isa(GetParam())) GTEST_SKIP() << "this CPU lacks " << isa_label(GetParam());
  }
  void TearDown() override { set_isa(saved_); }

 private:
  Isa saved_ = Isa::kPortable;
};

inline std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) {
  return info.param == Isa::kAvx512Vnni ? "Avx512Vnni"
         : info.param == Isa::kAvx512   ? "Avx512"
         : info.param == Isa::kAvx2     ? "Avx2"
                                        : "Portable";
}

#define CHORUS_INSTANTIATE_ISA(Suite)                                                 \
  INSTANTIATE_TEST_SUITE_P(Isa, Suite,                                                \
                           ::testing::Values(::chorus::cpu::Isa::kPortable,           \
                                             ::chorus::cpu::Isa::kAvx2,               \
                                             ::chorus::cpu::Isa::kAvx512,             \
                                             ::chorus::cpu::Isa::kAvx512Vnni),        \
                           ::chorus::cpu::test::isa_param_name)

// Each |got[i] − ref[i]| must be <= bound[i]; NaN fails. The reference must not be all ~zero,
// so a kernel that writes nothing (zero-initialised output) cannot pass. Returns the largest
// err/bound ratio (for the log).
inline double expect_close(const std::vector<float>& got, const std::vector<double>& ref,
                           const std::vector<double>& bound, const std::string& what) {
  EXPECT_EQ(got.size(), ref.size()) << what;
  EXPECT_EQ(bound.size(), ref.size()) << what;
  if (got.size() != ref.size() || bound.size() != ref.size() || ref.empty()) {
    ADD_FAILURE() << what << ": empty or mismatched comparison";
    return INFINITY;
  }
  double max_ref = 0.0, worst = 0.0;
  int failures = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= bound[i])) {
      if (++failures <= 5)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << ref[i]
                      << " (|err| " << err << " > bound " << bound[i] << ")";
    } else {
      worst = std::max(worst, err / bound[i]);
    }
  }
  EXPECT_EQ(failures, 0) << what;
  EXPECT_GT(max_ref, 1e-3) << what << ": reference is (nearly) all zero, comparison is vacuous";
  return worst;
}

// Same bound for every element.
inline double expect_close(const std::vector<float>& got, const std::vector<double>& ref,
                           double bound, const std::string& what) {
  return expect_close(got, ref, std::vector<double>(ref.size(), bound), what);
}

// Runs `kernel(pool)` with no pool, a 1-thread pool and a 3-thread pool; the outputs must be
// bitwise identical. Returns the output of the no-pool run.
inline std::vector<float> run_thread_counts(
    const std::function<std::vector<float>(ThreadPool*)>& kernel, const std::string& what) {
  static ThreadPool one(1), three(3);
  const auto a = kernel(nullptr), b = kernel(&one), c = kernel(&three);
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.size(), c.size());
  if (a.size() == b.size() && a.size() == c.size()) {
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << what << ": 1 thread differs from none";
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0)
        << what << ": 3 threads differ from 1";
  }
  return a;
}

}  // namespace chorus::cpu::test
