// The GPU sampler (runtime/cuda/sampler.cu) against sampling/: the counter-based uniforms bit for
// bit, and every row of a batch (every top-k / top-p select path, penalties, masks, eos rules)
// picking the id the CPU sampler picks; non-finite and fully masked rows report errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "gpu_test_util.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"

namespace chorus::gpu_test {
namespace {

TEST(GpuSampler, Uniform53IsBitExact) {
  REQUIRE_GPU();
  const int n = 1000;
  auto d = to_device(std::vector<double>(n, -1.0));
  ASSERT_TRUE(cuda::uniform53_batch(0x123456789abcdefull, 7, 42, 0, n, d.as<double>(), nullptr).ok());
  const auto g = to_host<double>(d, n);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(g[i], sampling::uniform53({0x123456789abcdefull, 7, 42, static_cast<uint32_t>(i), 0})) << i;
}

// Rows of V logits with their samplers (rules as the talker's: ids from 2048 masked except eos,
// the repetition penalty on 30 ids, eos blocked on odd rows) through cuda::sample, each against
// sampling::sample; the distinct ids chosen go to `distinct`.
struct SamplerRows {
  int V = 0;
  std::vector<float> logits;
  std::vector<cuda::DeviceSampler> params;
  std::vector<int32_t> frame, until;
  std::vector<uint8_t> pen;
};

SamplerRows sampler_rows(int V, int R, std::mt19937& rng) {
  SamplerRows t;
  t.V = V;
  t.logits.resize(static_cast<size_t>(R) * V);
  t.params.resize(R);
  t.frame.resize(R);
  t.until.resize(R);
  t.pen.assign(static_cast<size_t>(R) * V, 0);
  for (int r = 0; r < R; ++r) {
    cuda::DeviceSampler& p = t.params[r];
    p.repetition_penalty = 1.05f;
    const uint64_t seed = rng();
    p.seed_lo = static_cast<uint32_t>(seed);
    p.seed_hi = static_cast<uint32_t>(seed >> 32);
    p.rng_stream = r % 3;
    t.frame[r] = static_cast<int32_t>(rng() % 100);
    t.until[r] = r % 2 ? t.frame[r] + 1 : 0;
    for (int i = 0; i < 30; ++i) t.pen[static_cast<size_t>(r) * V + rng() % V] = 1;
  }
  return t;
}

void expect_rows_pick_the_cpu_ids(const SamplerRows& t, std::set<int32_t>& distinct) {
  const int V = t.V, R = static_cast<int>(t.params.size());
  const int32_t eos = std::min(2150, V - 1);
  const auto dl = to_device(t.logits);
  const auto dp = to_device(t.params), df = to_device(t.frame), du = to_device(t.until), dpen = to_device(t.pen);
  auto dout = to_device(std::vector<int32_t>(R, -7)), derr = to_device(std::vector<int32_t>(R, 0));
  auto dw = to_device(std::vector<double>(static_cast<size_t>(R) * V)), dids = to_device(std::vector<int32_t>(2 * R * V));
  cuda::SampleArgs a;
  a.logits = dl.as<float>();
  a.ld = V;
  a.vocab = V;
  a.rows = R;
  a.params = dp.as<cuda::DeviceSampler>();
  a.frame = df.as<int32_t>();
  a.codebook = 0;
  a.penalized = dpen.as<uint8_t>();
  a.allowed_below = std::min(2048, V);
  a.also_allowed = eos;
  a.blocked_id = eos;
  a.block_until_frame = du.as<int32_t>();
  a.out = dout.as<int32_t>();
  a.error = derr.as<int32_t>();
  a.scratch_w = dw.as<double>();
  a.scratch_ids = dids.as<int32_t>();
  ASSERT_TRUE(cuda::sample(a, nullptr).ok());
  const auto got = to_host<int32_t>(dout, R), err = to_host<int32_t>(derr, R);
  for (int r = 0; r < R; ++r) {
    const cuda::DeviceSampler& p = t.params[r];
    std::vector<int32_t> penalized;
    for (int i = 0; i < V; ++i)
      if (t.pen[static_cast<size_t>(r) * V + i]) penalized.push_back(i);
    sampling::LogitRules rules;
    rules.penalized = penalized;
    rules.allowed_below = std::min(2048, V);
    rules.also_allowed = {&eos, 1};
    if (t.frame[r] < t.until[r]) rules.blocked = {&eos, 1};
    sampling::SamplerParams sp;
    sp.greedy = p.greedy != 0;
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.repetition_penalty = p.repetition_penalty;
    std::vector<float> l(t.logits.begin() + static_cast<int64_t>(r) * V, t.logits.begin() + static_cast<int64_t>(r + 1) * V);
    const uint64_t seed = (static_cast<uint64_t>(p.seed_hi) << 32) | p.seed_lo;
    auto want = sampling::sample(l, rules, sp, {seed, p.rng_stream, static_cast<uint32_t>(t.frame[r]), 0, 0});
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(err[r], 0) << "row " << r;
    EXPECT_EQ(got[r], *want) << "vocabulary " << V << ", row " << r;
    distinct.insert(*want);
  }
}

// Kinds (r % 7): greedy, top-k, top-p, both, temperature 0, top-k above the vocabulary's finite
// count, and top-k over logits on a coarse grid (many values tie with the k-th largest, all of
// which are kept).
void expect_every_row_picks_the_cpu_id(int V, int R, uint32_t seed) {
  std::mt19937 rng(seed);
  SamplerRows t = sampler_rows(V, R, rng);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto& l : t.logits) l = nd(rng);
  for (int i = 0; i < 200; ++i) t.logits[rng() % t.logits.size()] = 1.5f;  // ties
  for (int r = 6; r < R; r += 7)
    for (int i = 0; i < V; ++i) t.logits[static_cast<size_t>(r) * V + i] = std::round(t.logits[static_cast<size_t>(r) * V + i] * 2) / 2;
  for (int r = 0; r < R; ++r) {
    cuda::DeviceSampler& p = t.params[r];
    switch (r % 7) {
      case 0: p.greedy = 1; break;
      case 1: p.temperature = 0.9f; p.top_k = 50; break;
      case 2: p.temperature = 1.3f; p.top_p = 0.8f; break;
      case 3: p.temperature = 0.7f; p.top_k = 5; p.top_p = 0.9f; break;
      case 4: p.temperature = 0.0f; break;
      case 5: p.temperature = 2.0f; p.top_k = 3000; break;
      default: p.temperature = 0.9f; p.top_k = 50; break;
    }
  }
  std::set<int32_t> distinct;
  expect_rows_pick_the_cpu_ids(t, distinct);
  EXPECT_GT(distinct.size(), static_cast<size_t>(R) * 2 / 5) << "vocabulary " << V;  // rows not trivially alike
}

// Vocabularies of the talker (3072: 8 ids per thread), the code predictor (2048: 4 per thread),
// Breeze's depth decoder (2051: 4 per thread, 17 warps), the most ids at 4 per thread (2304, 18
// warps), and one that leaves the last warp part empty.
TEST(GpuSampler, EveryRowPicksTheCpuId) {
  REQUIRE_GPU();
  expect_every_row_picks_the_cpu_id(3072, 112, 31);
  expect_every_row_picks_the_cpu_id(2048, 112, 32);
  expect_every_row_picks_the_cpu_id(2051, 56, 33);
  expect_every_row_picks_the_cpu_id(2304, 56, 35);
  expect_every_row_picks_the_cpu_id(700, 56, 34);
}

// Rows shaped for each path of the top-k select (kinds r % 6, top-k on every row): values of a
// normal law (the k-th largest in a bin of a few values, ranked by one warp); the same on a grid
// of 0.05 (ties inside that bin); a cluster of ~300 nearly equal values around the k-th largest
// (one bin holds them all: the radix fallback over distinct keys); 120 copies of one value at
// rank ~40 (the fallback over equal keys, through all four passes); the k-th largest in a low
// cluster beyond the 255 bins (the last bin, which holds everything below them); equal logits
// apart from the penalized ids (a tiny spread). Temperatures keep the kept ids' weights alive, so
// a wrong kept set moves the draw.
void expect_every_select_shape_picks_the_cpu_id(int V, int R, uint32_t seed) {
  std::mt19937 rng(seed);
  SamplerRows t = sampler_rows(V, R, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int finite = std::min(2048, V) + 1;  // the rules' allowed ids (eos when not blocked)
  for (int r = 0; r < R; ++r) {
    float* l = t.logits.data() + static_cast<size_t>(r) * V;
    cuda::DeviceSampler& p = t.params[r];
    p.temperature = 0.9f;
    p.top_k = std::array<int, 4>{50, 5, 1, 700}[(r / 6) % 4];
    for (int i = 0; i < V; ++i) l[i] = 3.0f * nd(rng);
    switch (r % 6) {
      case 0: break;
      case 1:
        for (int i = 0; i < V; ++i) l[i] = std::round(l[i] * 20) / 20;
        break;
      case 2:
        for (int i = 0; i < V; ++i)
          if (l[i] > 3.0f && l[i] < 7.0f) l[i] = 6.0f + 1e-4f * nd(rng);
        break;
      case 3: {
        std::vector<float> sorted(l, l + std::min(2048, V));
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        for (int i = 0; i < 120; ++i) l[rng() % std::min(2048, V)] = sorted[40];
        break;
      }
      case 4:
        for (int i = 0; i < V; ++i) l[i] = rng() % 5 == 0 ? -100.0f + nd(rng) : nd(rng);
        p.temperature = 30.0f;
        p.top_k = finite - 100;
        break;
      default:
        for (int i = 0; i < V; ++i) l[i] = 0.5f;
        break;
    }
  }
  std::set<int32_t> distinct;
  expect_rows_pick_the_cpu_ids(t, distinct);
  EXPECT_GT(distinct.size(), static_cast<size_t>(R) / 2) << "vocabulary " << V;  // rows not trivially alike
}

// Breeze's depth decoder (2051 ids, 4 per thread) and the talker (3072, 8 per thread).
TEST(GpuSampler, EverySelectPathPicksTheCpuId) {
  REQUIRE_GPU();
  expect_every_select_shape_picks_the_cpu_id(2051, 96, 41);
  expect_every_select_shape_picks_the_cpu_id(3072, 96, 42);
}

TEST(GpuSampler, NonFiniteAndFullyMaskedRowsReportErrors) {
  REQUIRE_GPU();
  const int V = 64;
  for (int which = 0; which < 2; ++which) {
    std::vector<float> logits(V, 0.5f);
    if (which == 0) logits[10] = std::nanf("");
    const auto dl = to_device(logits);
    const auto dp = to_device(std::vector<cuda::DeviceSampler>(1));
    auto dout = to_device(std::vector<int32_t>(1, -7)), derr = to_device(std::vector<int32_t>(1, 0));
    auto dw = to_device(std::vector<double>(V)), dids = to_device(std::vector<int32_t>(2 * V));
    cuda::SampleArgs a;
    a.logits = dl.as<float>();
    a.ld = V;
    a.vocab = V;
    a.rows = 1;
    a.params = dp.as<cuda::DeviceSampler>();
    if (which == 1) a.allowed_below = 0;  // everything masked
    a.out = dout.as<int32_t>();
    a.error = derr.as<int32_t>();
    a.scratch_w = dw.as<double>();
    a.scratch_ids = dids.as<int32_t>();
    ASSERT_TRUE(cuda::sample(a, nullptr).ok());
    EXPECT_EQ(to_host<int32_t>(derr, 1)[0], which == 0 ? cuda::kSampleNonFinite : cuda::kSampleAllMasked);
  }
}

}  // namespace
}  // namespace chorus::gpu_test
