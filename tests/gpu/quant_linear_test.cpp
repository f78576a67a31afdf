// The quantised linear (runtime/cuda/linear_quant.cu and linear.cu's tensor-core path) against the
// CPU on the same quantised weights: int8 against cpu::linear over the CPU int8 format itself
// (cpu::QuantMatrix: the GPU holds its codes and scales in the row layout), fp8 against cpu::linear
// over the f32 weights decoded on the host (cpu::RowQuantMatrix::value). Outputs are poisoned with
// NaN first. Tolerances as ops_test.cpp: summation-order rounding (2e-5 of the largest output) on
// the matrix-vector path, 2e-4 on the tensor-core path (inputs and dequantised weights split into
// two bf16 parts each). Planted mistakes in the uploaded scales (each group read with the next
// group's scale; a row read with the next row's scales) must break the comparison.
#include <algorithm>
#include <cmath>
#include <optional>

#include "gpu_test_util.h"
#include "runtime/cpu/quant.h"
#include "runtime/cpu/row_quant.h"

namespace chorus::gpu_test {
namespace {

using cpu::WeightFormat;

// A quantised [rows, cols] matrix on the host (with its CPU reference form) and on the device.
struct QMatrix {
  cpu::RowQuantMatrix rows;
  std::optional<cpu::QuantMatrix> int8;  // the CPU int8 format the rows came from
  std::vector<float> values;             // the decoded weights [rows, cols], for fp8's reference
  cuda::DeviceBuffer codes, scales;
  cuda::DeviceMatrix gpu() const {
    return {nullptr, rows.rows, rows.cols, rows.format, codes.as<const uint8_t>(), scales.as<const uint16_t>()};
  }
  // y = x · wᵀ (+ bias) on the CPU with the same weights.
  void cpu_linear(const float* x, int64_t M, const float* bias, float* y) const {
    if (int8) {
      cpu::linear(x, M, *int8, bias, y);
    } else {
      cpu::linear(x, M, cpu::MatrixRef{DType::kF32, values.data(), rows.rows, rows.cols}, bias, y);
    }
  }
  // Uploads `rows` (after a test changed them).
  void upload() {
    codes = to_device(rows.codes);
    scales = to_device(rows.scales);
  }
  // A copy with its own device buffers.
  QMatrix clone() const {
    QMatrix c;
    c.rows = rows;
    c.int8 = int8;
    c.values = values;
    c.upload();
    return c;
  }
};

QMatrix random_quant(std::mt19937& rng, int64_t rows, int64_t cols, WeightFormat f) {
  QMatrix q;
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::vector<uint16_t> host(static_cast<size_t>(rows * cols));
  for (auto& h : host) h = f32_to_bf16(d(rng));
  const cpu::MatrixRef w{DType::kBF16, host.data(), rows, cols};
  if (f == WeightFormat::kInt8) {
    auto c = cpu::QuantMatrix::quantize(w, f);
    EXPECT_TRUE(c.ok());
    q.int8 = std::move(*c);
    auto r = cpu::row_layout(*q.int8);
    EXPECT_TRUE(r.ok());
    q.rows = std::move(*r);
  } else {
    auto r = cpu::quantize_rows(w, f);
    EXPECT_TRUE(r.ok());
    q.rows = std::move(*r);
  }
  q.values.resize(host.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) q.values[static_cast<size_t>(r * cols + c)] = q.rows.value(r, c);
  q.upload();
  return q;
}

std::vector<float> cpu_rms_norm(const std::vector<float>& x, const std::vector<float>& g, int64_t rows, int64_t dim) {
  std::vector<float> y(x.size());
  cpu::rms_norm(x.data(), g.data(), y.data(), rows, dim, 1e-6f);
  return y;
}

bool tensor_path(int path, int64_t M) {
  return path == cuda::kLinearTensor || (path == cuda::kLinearAuto && M > cuda::kGemvMaxRows);
}

class GpuQuantLinear : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(GpuQuantLinear, EveryEpiloguePathAndShapeMatchesTheCpuOnTheSameWeights) {
  REQUIRE_GPU();
  const WeightFormat f = GetParam();
  std::mt19937 rng(41);
  const int64_t kMaxK = 3072, N[3] = {96, 32, 48};
  auto ws = cuda::LinearWorkspace::create(64, kMaxK, 512, 96 * kMaxK);
  ASSERT_TRUE(ws.ok()) << ws.error().to_string();
  int checked = 0;
  for (int path : {cuda::kLinearGemv, cuda::kLinearTensor, cuda::kLinearAuto})
    for (int64_t M : {1, 2, 3, 5, 8, 13, 40})
      for (int64_t K : {1024, 2048, 3072, 48, 784}) {
        SCOPED_TRACE(testing::Message() << "path " << path << " M " << M << " K " << K);
        const double tol = tensor_path(path, M) ? 2e-4 : 2e-5;
        const auto x = random_vec(rng, static_cast<size_t>(M * K));
        const auto g = random_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
        const auto dx = to_device(x), dg = to_device(g);
        const auto xn = cpu_rms_norm(x, g, M, K);
        QMatrix w[3];
        std::vector<float> bias[3];
        cuda::DeviceBuffer dbias[3];
        for (int i = 0; i < 3; ++i) {
          w[i] = random_quant(rng, N[i], K, f);
          bias[i] = random_vec(rng, static_cast<size_t>(N[i]));
          dbias[i] = to_device(bias[i]);
        }
        {  // kStore, three outputs, RMS-norm prologue and bias
          cuda::DeviceBuffer dy[3];
          cuda::LinearArgs a;
          a.x = dx.as<float>();
          a.ldx = K;
          a.M = M;
          a.norm_weight = dg.as<float>();
          a.outputs = 3;
          for (int i = 0; i < 3; ++i) {
            dy[i] = poisoned(static_cast<size_t>(M * N[i]));
            a.out[i] = {w[i].gpu(), dbias[i].as<float>(), dy[i].as<float>(), N[i]};
          }
          const Status st = cuda::linear(a, &*ws, nullptr, path);
          ASSERT_TRUE(st.ok()) << st.error().to_string();
          for (int i = 0; i < 3; ++i) {
            std::vector<float> want(static_cast<size_t>(M * N[i]));
            w[i].cpu_linear(xn.data(), M, bias[i].data(), want.data());
            EXPECT_LT(rel_err(to_host<float>(dy[i], want.size()), want), tol) << "output " << i;
          }
        }
        {  // kAdd (residual), no norm
          const auto y0 = random_vec(rng, static_cast<size_t>(M * N[0]));
          auto dy = to_device(y0);
          cuda::LinearArgs a;
          a.x = dx.as<float>();
          a.ldx = K;
          a.M = M;
          a.out[0] = {w[0].gpu(), nullptr, dy.as<float>(), N[0]};
          a.epilogue = cuda::Epilogue::kAdd;
          ASSERT_TRUE(cuda::linear(a, &*ws, nullptr, path).ok());
          std::vector<float> want(y0.size());
          w[0].cpu_linear(x.data(), M, nullptr, want.data());
          for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
          EXPECT_LT(rel_err(to_host<float>(dy, want.size()), want), tol) << "residual add";
        }
        {  // kSwiGlu with norm
          const QMatrix up = random_quant(rng, N[2], K, f);
          auto dy = poisoned(static_cast<size_t>(M * N[2]));
          cuda::LinearArgs a;
          a.x = dx.as<float>();
          a.ldx = K;
          a.M = M;
          a.norm_weight = dg.as<float>();
          a.out[0] = {w[2].gpu(), nullptr, dy.as<float>(), N[2]};
          a.out[1] = {up.gpu(), nullptr, dy.as<float>(), N[2]};
          a.outputs = 2;
          a.epilogue = cuda::Epilogue::kSwiGlu;
          ASSERT_TRUE(cuda::linear(a, &*ws, nullptr, path).ok());
          std::vector<float> gate(static_cast<size_t>(M * N[2])), upv(gate.size()), want(gate.size());
          w[2].cpu_linear(xn.data(), M, nullptr, gate.data());
          up.cpu_linear(xn.data(), M, nullptr, upv.data());
          cpu::silu_mul(gate.data(), upv.data(), want.data(), static_cast<int64_t>(want.size()));
          EXPECT_LT(rel_err(to_host<float>(dy, want.size()), want), tol) << "swiglu";
        }
        ++checked;
      }
  EXPECT_EQ(checked, 3 * 7 * 5);
}

// A row's result does not depend on the other rows of the call, nor on the kernel (the single-row
// launch and the tiles of 2, 4 and 8 rows keep one per-feature order and one RMS sum), with and
// without the norm, in both activation modes.
TEST_P(GpuQuantLinear, GemvRowsAreIndependentOfTheBatchBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(42);
  const int64_t K = 2048, N = 160, M = 13;
  const QMatrix w = random_quant(rng, N, K, GetParam());
  auto x = random_vec(rng, static_cast<size_t>(M * K));
  const auto g = random_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
  for (const bool bf16 : {false, true}) {
    if (bf16)
      for (float& v : x) v = round_to_bf16(v);
    const auto dx = to_device(x), dg = to_device(g);
    for (const bool norm : {false, true}) {
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "f32") << (norm ? ", normed" : ""));
      cuda::LinearArgs a;
      a.x = dx.as<float>();
      a.ldx = K;
      a.norm_weight = norm ? dg.as<float>() : nullptr;
      a.bf16 = bf16;
      std::vector<std::vector<float>> by_m;
      for (int64_t m : {13, 4, 2, 1}) {
        auto y = poisoned(static_cast<size_t>(m * N));
        a.M = m;
        a.out[0] = {w.gpu(), nullptr, y.as<float>(), N};
        ASSERT_TRUE(cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv).ok());
        by_m.push_back(to_host<float>(y, static_cast<size_t>(m * N)));
      }
      for (size_t i = 1; i < by_m.size(); ++i)
        for (size_t j = 0; j < by_m[i].size(); ++j) ASSERT_EQ(by_m[i][j], by_m[0][j]) << "call " << i << " element " << j;
    }
  }
}

// The comparison above catches a scale read from the wrong place: each group with the next group's
// scale (an off-by-one group index), or each row with the next row's scales. The same matrix
// uploaded correctly passes, so only the planted mistake fails it.
TEST_P(GpuQuantLinear, PlantedScaleMistakesBreakTheComparison) {
  REQUIRE_GPU();
  std::mt19937 rng(43);
  const int64_t K = 1024, N = 64, groups = K / 32;
  auto ws = cuda::LinearWorkspace::create(32, K, N, N * K);
  ASSERT_TRUE(ws.ok());
  const QMatrix w = random_quant(rng, N, K, GetParam());
  for (int64_t M : {1, 3, 20}) {
    const double tol = M > cuda::kGemvMaxRows ? 2e-4 : 2e-5;
    const auto x = random_vec(rng, static_cast<size_t>(M * K));
    const auto dx = to_device(x);
    std::vector<float> want(static_cast<size_t>(M * N));
    w.cpu_linear(x.data(), M, nullptr, want.data());
    const auto run = [&](const QMatrix& q) {
      auto y = poisoned(want.size());
      cuda::LinearArgs a;
      a.x = dx.as<float>();
      a.ldx = K;
      a.M = M;
      a.out[0] = {q.gpu(), nullptr, y.as<float>(), N};
      EXPECT_TRUE(cuda::linear(a, &*ws, nullptr).ok());
      return rel_err(to_host<float>(y, want.size()), want);
    };
    SCOPED_TRACE(testing::Message() << "M " << M);
    EXPECT_LT(run(w), tol);
    QMatrix shifted = w.clone();
    for (int64_t r = 0; r < N; ++r) {
      const auto row = shifted.rows.scales.begin() + r * groups;
      std::rotate(row, row + 1, row + groups);
    }
    shifted.upload();
    const double e_group = run(shifted);
    QMatrix other_row = w.clone();
    std::rotate(other_row.rows.scales.begin(), other_row.rows.scales.begin() + groups, other_row.rows.scales.end());
    other_row.upload();
    const double e_row = run(other_row);
    std::printf("[gpu quant] %s M %lld: planted off-by-one group %.3g, wrong row %.3g (tolerance %.0e)\n",
                cpu::weight_format_name(GetParam()), static_cast<long long>(M), e_group, e_row, tol);
    EXPECT_GT(e_group, 100 * tol);
    EXPECT_GT(e_row, 100 * tol);
  }
}

// Malformed quantised calls are refused, not run: mixed formats, a width that is not a multiple of
// 16, missing scales, and a workspace without room to dequantise on the tensor-core path.
TEST(GpuQuantLinearArgs, RefusesWhatTheKernelsCannotRun) {
  REQUIRE_GPU();
  std::mt19937 rng(44);
  const QMatrix w8 = random_quant(rng, 32, 64, WeightFormat::kInt8);
  const QMatrix wf = random_quant(rng, 32, 64, WeightFormat::kFp8);
  const auto dx = to_device(random_vec(rng, 20 * 64));
  auto y = poisoned(20 * 32);
  cuda::LinearArgs a;
  a.x = dx.as<float>();
  a.ldx = 64;
  a.M = 1;
  a.out[0] = {w8.gpu(), nullptr, y.as<float>(), 32};
  EXPECT_TRUE(cuda::linear(a, nullptr, nullptr).ok());
  a.out[1] = {wf.gpu(), nullptr, y.as<float>(), 32};
  a.outputs = 2;
  EXPECT_FALSE(cuda::linear(a, nullptr, nullptr).ok()) << "int8 and fp8 in one call";
  a.outputs = 1;
  cuda::DeviceMatrix narrow = w8.gpu();
  narrow.cols = 40;
  a.out[0].w = narrow;
  a.ldx = 40;
  EXPECT_FALSE(cuda::linear(a, nullptr, nullptr).ok()) << "cols % 16 != 0";
  cuda::DeviceMatrix no_scales = w8.gpu();
  no_scales.scales = nullptr;
  a.out[0].w = no_scales;
  a.ldx = 64;
  EXPECT_FALSE(cuda::linear(a, nullptr, nullptr).ok()) << "no scales";
  auto ws = cuda::LinearWorkspace::create(32, 64, 64);  // no room to dequantise
  ASSERT_TRUE(ws.ok());
  a.out[0].w = w8.gpu();
  a.M = 20;
  EXPECT_FALSE(cuda::linear(a, &*ws, nullptr).ok()) << "tensor path without dequantisation scratch";
}

INSTANTIATE_TEST_SUITE_P(Formats, GpuQuantLinear, ::testing::Values(WeightFormat::kInt8, WeightFormat::kFp8),
                         [](const auto& info) { return std::string(cpu::weight_format_name(info.param)); });

}  // namespace
}  // namespace chorus::gpu_test
