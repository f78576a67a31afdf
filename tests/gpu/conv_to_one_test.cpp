// conv_to_one_bf16 (runtime/cuda/conv_to_one.cu) against the general path it replaces for the
// vocoder's last conv: im2col's f32 columns multiplied by gemm in bf16 precision. The samples and
// the streams' next histories must be the same bits, for several streams with their own histories,
// with and without SnakeBeta on the input, with dilation, with fewer steps than the history holds
// (the window then mixes history and input), with steps past one block's 128, and with no steps
// (the history only moves).
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "runtime/cuda/conv_ops.h"

namespace chorus::gpu_test {
namespace {

namespace ops = cuda::codec_ops;

int64_t differing_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

struct Case {
  int64_t cin, kernel, dilation, steps, streams;
  bool snake;
};

void check_case(const Case& cs, uint32_t seed) {
  SCOPED_TRACE("cin " + std::to_string(cs.cin) + " kernel " + std::to_string(cs.kernel) + " dilation " +
               std::to_string(cs.dilation) + " steps " + std::to_string(cs.steps) + " streams " +
               std::to_string(cs.streams) + (cs.snake ? " snake" : ""));
  std::mt19937 rng(seed);
  const int64_t H = (cs.kernel - 1) * cs.dilation, N = cs.streams * cs.steps, K = cs.cin * cs.kernel;
  const cuda::DeviceBuffer x = to_device(random_vec(rng, static_cast<size_t>(cs.cin * N), -2.0f, 2.0f));
  const cuda::DeviceBuffer w = to_device(random_vec(rng, static_cast<size_t>(K), -0.3f, 0.3f));
  const cuda::DeviceBuffer alpha = to_device(random_vec(rng, static_cast<size_t>(cs.cin), 0.2f, 2.0f));
  const cuda::DeviceBuffer inv_beta = to_device(random_vec(rng, static_cast<size_t>(cs.cin), 0.5f, 1.5f));
  // Per stream: its previous history, and one next-history buffer for each path.
  std::vector<cuda::DeviceBuffer> hin, hout[2];
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs[2];
  for (int64_t b = 0; b < cs.streams; ++b) {
    hin.push_back(to_device(random_vec(rng, static_cast<size_t>(std::max<int64_t>(1, cs.cin * H)))));
    in_ptrs.push_back(hin.back().as<const float>());
    for (int p = 0; p < 2; ++p) {
      hout[p].push_back(poisoned(static_cast<size_t>(std::max<int64_t>(1, cs.cin * H))));
      out_ptrs[p].push_back(hout[p].back().as<float>());
    }
  }
  const cuda::DeviceBuffer in_arr = to_device(in_ptrs), out_arr[2] = {to_device(out_ptrs[0]), to_device(out_ptrs[1])};

  auto input = [&](int p) {
    ops::Im2col a;
    a.hist = ops::StreamHist{in_arr.as<const float* const>(), out_arr[p].as<float* const>(), 0};
    a.x = x.as<const float>();
    a.xcs = N;
    a.xts = 1;
    a.cin = cs.cin;
    a.steps = cs.steps;
    a.streams = cs.streams;
    a.kernel = cs.kernel;
    a.dilation = cs.dilation;
    if (cs.snake) a.snake = ops::Snake{alpha.as<const float>(), inv_beta.as<const float>()};
    return a;
  };
  // The general path: f32 columns, then the product in bf16 precision.
  const cuda::DeviceBuffer col = poisoned(static_cast<size_t>(std::max<int64_t>(1, K * N)));
  const cuda::DeviceBuffer want = poisoned(static_cast<size_t>(std::max<int64_t>(1, N)));
  const size_t pf = ops::gemm_partial_floats(1, N, K);
  const cuda::DeviceBuffer partial = poisoned(std::max<size_t>(pf, 1));
  ops::Im2col a = input(0);
  a.col = col.as<float>();
  ASSERT_TRUE(ops::im2col_causal(a, nullptr).ok());
  ASSERT_TRUE(ops::gemm(false, false, 1, N, K, 1.0f, w.as<const float>(), K, col.as<const float>(), N, 0.0f,
                        want.as<float>(), N, partial.as<float>(), pf, nullptr, ops::GemmPrecision::kBf16)
                  .ok());
  // In place.
  const cuda::DeviceBuffer got = poisoned(static_cast<size_t>(std::max<int64_t>(1, N)));
  ops::ConvToOne one;
  one.in = input(1);
  one.w = w.as<const float>();
  one.y = got.as<float>();
  ASSERT_TRUE(ops::conv_to_one_fits(one.in));
  const Status st = ops::conv_to_one_bf16(one, nullptr);
  ASSERT_TRUE(st.ok()) << st.error().to_string();

  const std::vector<float> g = to_host<float>(got, static_cast<size_t>(N));
  const std::vector<float> e = to_host<float>(want, static_cast<size_t>(N));
  EXPECT_EQ(differing_bits(g, e), 0);
  int64_t nonzero = 0;
  for (float v : e) nonzero += v != 0.0f && std::isfinite(v);
  EXPECT_EQ(nonzero, N);  // the reference is real samples, not untouched NaN or zeros
  for (int64_t b = 0; b < cs.streams && H > 0; ++b)
    EXPECT_EQ(differing_bits(to_host<float>(hout[1][b], static_cast<size_t>(cs.cin * H)),
                             to_host<float>(hout[0][b], static_cast<size_t>(cs.cin * H))),
              0)
        << "stream " << b << "'s next history";
}

TEST(GpuConvToOne, GivesTheBitsOfTheColumnsAndTheProduct) {
  REQUIRE_GPU();
  const Case cases[] = {{96, 7, 1, 1920, 3, true}, {96, 7, 1, 4, 4, true},   {40, 3, 3, 300, 2, false},
                        {24, 5, 2, 129, 5, true},  {96, 7, 1, 0, 2, true},   {37, 7, 1, 1000, 1, true},
                        {96, 7, 1, 128, 2, false}};
  uint32_t seed = 40;
  for (const Case& c : cases) check_case(c, seed++);
}

TEST(GpuConvToOne, RefusesWhatItCannotTake) {
  REQUIRE_GPU();
  ops::ConvToOne one;
  one.in.cin = 96;
  one.in.kernel = 7;
  one.in.steps = 10;
  one.in.streams = 1;
  EXPECT_EQ(ops::conv_to_one_bf16(one, nullptr).error().code, ErrorCode::kInvalidArgument);  // no weights
  one.in.cin = 100000;  // a window past shared memory
  EXPECT_FALSE(ops::conv_to_one_fits(one.in));
}

}  // namespace
}  // namespace chorus::gpu_test
