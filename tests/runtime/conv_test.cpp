// conv1d and conv_transpose1d against naive double-precision references: strides, dilations,
// groups (incl. depthwise), transposed convs with stride > 1 (overlapping and gapped), all weight
// dtypes. Tolerance: the sum-of-products bound (2√n + 2)·u·Σ|terms| of linear_test.cpp, with n the
// number of terms of the output element.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/cpu/micro_kernels.h"
#include "runtime/kernel_test_util.h"

namespace chorus::cpu::test {
namespace {

double sum_bound(int64_t terms, double mag) {
  return (2.0 * std::sqrt(static_cast<double>(terms)) + 2.0) * kU * mag;
}

struct ConvCase {
  int64_t Cin, T, Cout, K, stride, dilation, groups;
};

std::string describe(const char* kind, DType dt, const ConvCase& c) {
  return std::string(kind) + " " + dtype_name(dt) + " Cin=" + std::to_string(c.Cin) +
         " T=" + std::to_string(c.T) + " Cout=" + std::to_string(c.Cout) +
         " K=" + std::to_string(c.K) + " stride=" + std::to_string(c.stride) +
         " dilation=" + std::to_string(c.dilation) + " groups=" + std::to_string(c.groups);
}

double check_conv1d(DType dt, const ConvCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t cin_g = c.Cin / c.groups, cout_g = c.Cout / c.groups;
  const int64_t Tout = (c.T - c.dilation * (c.K - 1) - 1) / c.stride + 1;
  const auto x = random_vec(rng, static_cast<size_t>(c.Cin * c.T));
  const TestMatrix w = random_matrix(dt, c.Cout, cin_g * c.K, rng);
  const auto bias = random_vec(rng, static_cast<size_t>(c.Cout));
  std::vector<double> ref(static_cast<size_t>(c.Cout * Tout)), bound(ref.size());
  for (int64_t co = 0; co < c.Cout; ++co) {
    const int64_t g = co / cout_g;
    for (int64_t t = 0; t < Tout; ++t) {
      double s = bias[co], mag = std::fabs(bias[co]);
      for (int64_t ci = 0; ci < cin_g; ++ci)
        for (int64_t k = 0; k < c.K; ++k) {
          const double p = w.at(co, ci * c.K + k) *
                           x[(g * cin_g + ci) * c.T + t * c.stride + k * c.dilation];
          s += p;
          mag += std::fabs(p);
        }
      ref[co * Tout + t] = s;
      bound[co * Tout + t] = sum_bound(cin_g * c.K + 1, mag);
    }
  }
  const std::string what = describe("conv1d", dt, c);
  const auto y = run_thread_counts(
      [&](ThreadPool* pool) {
        std::vector<float> out(ref.size(), NAN);
        conv1d(x.data(), c.Cin, c.T, w.ref(), c.K, bias.data(), c.stride, c.dilation, c.groups,
               out.data(), pool);
        return out;
      },
      what);
  return expect_close(y, ref, bound, what);
}

double check_conv_transpose1d(DType dt, const ConvCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t cin_g = c.Cin / c.groups, cout_g = c.Cout / c.groups;
  const int64_t Tout = (c.T - 1) * c.stride + c.K;
  const auto x = random_vec(rng, static_cast<size_t>(c.Cin * c.T));
  const TestMatrix w = random_matrix(dt, c.Cin, cout_g * c.K, rng);
  const auto bias = random_vec(rng, static_cast<size_t>(c.Cout));
  std::vector<double> ref(static_cast<size_t>(c.Cout * Tout)), mag(ref.size());
  std::vector<int64_t> terms(ref.size(), 1);
  for (int64_t co = 0; co < c.Cout; ++co)
    for (int64_t n = 0; n < Tout; ++n) {
      ref[co * Tout + n] = bias[co];
      mag[co * Tout + n] = std::fabs(bias[co]);
    }
  for (int64_t ci = 0; ci < c.Cin; ++ci) {
    const int64_t g = ci / cin_g;
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t col = 0; col < cout_g; ++col)
        for (int64_t k = 0; k < c.K; ++k) {
          const int64_t co = g * cout_g + col, idx = co * Tout + t * c.stride + k;
          const double p = x[ci * c.T + t] * w.at(ci, col * c.K + k);
          ref[idx] += p;
          mag[idx] += std::fabs(p);
          terms[idx]++;
        }
  }
  std::vector<double> bound(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) bound[i] = sum_bound(terms[i], mag[i]);
  const std::string what = describe("conv_transpose1d", dt, c);
  const auto y = run_thread_counts(
      [&](ThreadPool* pool) {
        std::vector<float> out(ref.size(), NAN);
        conv_transpose1d(x.data(), c.Cin, c.T, w.ref(), c.Cout, c.K, bias.data(), c.stride,
                         c.groups, out.data(), pool);
        return out;
      },
      what);
  return expect_close(y, ref, bound, what);
}

using ConvTest = IsaTest;

TEST_P(ConvTest, Conv1dMatchesDoubleReference) {
  const ConvCase cases[] = {
      // Cin  T   Cout K  stride dil groups
      {1, 10, 1, 1, 1, 1, 1},     {3, 17, 5, 3, 1, 1, 1},    {4, 30, 6, 3, 2, 1, 1},
      {6, 40, 4, 5, 1, 3, 2},     {8, 25, 8, 7, 1, 1, 8},    {16, 33, 32, 4, 4, 1, 1},
      {5, 300, 7, 7, 1, 9, 1},    {40, 50, 36, 3, 1, 1, 4},  {2, 9, 3, 9, 1, 1, 1},
      {3, 700, 20, 2, 3, 2, 1},   {12, 20, 24, 1, 1, 1, 3},
  };
  uint32_t seed = 21;
  double worst = 0.0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const auto& c : cases) worst = std::max(worst, check_conv1d(dt, c, seed++));
  std::printf("conv1d: worst |err| / bound = %.3g\n", worst);
}

TEST_P(ConvTest, ConvTranspose1dMatchesDoubleReference) {
  const ConvCase cases[] = {
      // Cin  T  Cout K  stride dil(unused) groups
      {1, 1, 1, 1, 1, 1, 1},   {3, 7, 2, 4, 2, 1, 1},    {4, 10, 6, 3, 2, 1, 2},
      {6, 5, 6, 2, 2, 1, 6},   {5, 9, 4, 16, 8, 1, 1},   {8, 70, 12, 10, 5, 1, 1},
      {3, 11, 20, 16, 8, 1, 1}, {2, 5, 3, 2, 3, 1, 1},   {16, 13, 40, 2, 2, 1, 1},
  };
  uint32_t seed = 61;
  double worst = 0.0;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (const auto& c : cases) worst = std::max(worst, check_conv_transpose1d(dt, c, seed++));
  std::printf("conv_transpose1d: worst |err| / bound = %.3g\n", worst);
}

TEST_P(ConvTest, LargeConvsAreThreadCountInvariant) {
  check_conv1d(DType::kBF16, {64, 600, 64, 7, 1, 1, 1}, 91);
  check_conv_transpose1d(DType::kBF16, {96, 40, 48, 10, 5, 1, 1}, 92);
}

// conv1d walks the depth (cin·K) in panels whose sums carry over (axpy_panel's resume): an axpy
// panel split into consecutive resumed calls must give one call's bits, for every row count and
// ragged widths; and the split result must be the sum (near a double reference), so a resume
// that restarted from init, or skipped c, fails.
TEST_P(ConvTest, AxpyPanelResumedInPiecesGivesOneCallsBits) {
  const auto& mk = detail::active_kernels();
  std::mt19937 rng(17);
  for (int mr = 1; mr <= detail::kTileMax; ++mr)
    for (int64_t ncols : {int64_t{5}, int64_t{64}, int64_t{133}}) {
      const int64_t R = 300, ld = ncols + 3;
      const auto a = random_vec(rng, static_cast<size_t>(mr * R));
      const auto init = random_vec(rng, static_cast<size_t>(mr));
      std::vector<std::vector<float>> b;
      std::vector<const float*> rows;
      for (int64_t r = 0; r < R; ++r) b.push_back(random_vec(rng, static_cast<size_t>(ncols + 2)));
      for (const auto& v : b) rows.push_back(v.data());
      std::vector<float> whole(static_cast<size_t>(mr * ld), NAN), split(whole.size(), NAN);
      mk.axpy_panel(mr, ncols, R, a.data(), R, 1, rows.data(), 2, init.data(), whole.data(), ld, false);
      for (int64_t r0 = 0, i = 0; r0 < R; ++i) {
        const int64_t n = std::min<int64_t>(i % 2 ? 128 : 44, R - r0);
        mk.axpy_panel(mr, ncols, n, a.data() + r0, R, 1, rows.data() + r0, 2, init.data(), split.data(), ld, r0 > 0);
        r0 += n;
      }
      for (int m = 0; m < mr; ++m)
        for (int64_t c = 0; c < ld; ++c) {
          const float w = whole[static_cast<size_t>(m * ld + c)], s = split[static_cast<size_t>(m * ld + c)];
          if (c >= ncols) {  // past the panel: untouched
            ASSERT_TRUE(std::isnan(w) && std::isnan(s)) << "mr " << mr << " col " << c;
            continue;
          }
          ASSERT_EQ(std::memcmp(&w, &s, sizeof w), 0) << "mr " << mr << " ncols " << ncols << " col " << c;
          double ref = init[static_cast<size_t>(m)], mag = std::fabs(ref);
          for (int64_t r = 0; r < R; ++r) {
            const double p = static_cast<double>(a[static_cast<size_t>(m * R + r)]) * b[static_cast<size_t>(r)][static_cast<size_t>(2 + c)];
            ref += p;
            mag += std::fabs(p);
          }
          ASSERT_LE(std::fabs(s - ref), sum_bound(R + 1, mag)) << "mr " << mr << " col " << c;
        }
    }
}

CHORUS_INSTANTIATE_ISA(ConvTest);

}  // namespace
}  // namespace chorus::cpu::test
