// The code predictor's cached depth walk against the reference it must equal: recomputing the
// whole prefix [z, CE(c0), CPE_1(c1), …, CPE_k(c_k)] from scratch at every step. Runs on the tiny
// reference models (random, non-zero heads) with and without the 1.7B-style projection.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "golden_cases.h"
#include "sampling/sampler.h"

namespace chorus::test {
namespace {

using qwen3_tts::FrameWalk;
using qwen3_tts::Model;

const char* const kModels[] = {"models/tiny_custom_voice" /* identity projection */,
                               "models/tiny_voice_design" /* small_to_mtp_projection */};

// [z, CE(c0)] with z a random talker-space vector.
std::vector<float> first_rows(const Model& m, uint32_t seed, int32_t c0) {
  const int64_t H = m.hidden();
  std::vector<float> rows(2 * H, 0.0f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < H; ++i) rows[i] = nd(rng);
  m.talker().add_codec_row(c0, rows.data() + H);
  return rows;
}

struct WalkResult {
  std::vector<int32_t> codes;
  std::vector<float> logits;  // [groups − 1, vocab]
};

WalkResult cached_walk(const Model& m, nn::KvCache& cache, const std::vector<float>& rows, int32_t c0,
                       const sampling::SamplerParams& p, uint64_t seed) {
  const auto& cp = m.code_predictor();
  WalkResult r;
  r.codes.assign(m.groups(), 0);
  r.codes[0] = c0;
  r.logits.assign((m.groups() - 1) * cp.vocab(), 0.0f);
  FrameWalk w;
  w.cache = &cache;
  w.first_rows = rows.data();
  w.params = p;
  w.address = {seed, 0, 5, 0, 0};
  w.codes = r.codes.data();
  w.logits = r.logits.data();
  EXPECT_TRUE(cp.walk({&w, 1}, nullptr).ok());
  return r;
}

// The reference: a fresh cache and the full prefix at every step.
WalkResult recompute_walk(const Model& m, const std::vector<float>& rows, int32_t c0, const sampling::SamplerParams& p,
                          uint64_t seed, nn::KvCache* last_cache = nullptr) {
  const auto& cp = m.code_predictor();
  const int64_t H = m.hidden(), V = cp.vocab(), G = m.groups();
  WalkResult r;
  r.codes.assign(G, 0);
  r.codes[0] = c0;
  r.logits.assign((G - 1) * V, 0.0f);
  std::vector<float> prefix(rows);
  for (int64_t k = 0; k + 1 < G; ++k) {
    if (k > 0) {
      prefix.resize(prefix.size() + H, 0.0f);
      EXPECT_TRUE(cp.add_code_embedding(k, r.codes[k], prefix.data() + (k + 1) * H).ok());
    }
    auto cache = cp.make_cache();
    const nn::SequenceRows seq{&cache, 0, k + 2};
    const int64_t head = k;
    float* l = r.logits.data() + k * V;
    EXPECT_TRUE(cp.forward({&seq, 1}, prefix.data(), {&head, 1}, l, nullptr).ok());
    std::vector<float> work(l, l + V);
    auto id = sampling::sample(work, {}, p, {seed, 0, 5, static_cast<uint32_t>(k + 1), 0});
    EXPECT_TRUE(id.ok());
    r.codes[k + 1] = id.ok() ? *id : -1;
    if (last_cache && k + 2 == G) *last_cache = std::move(cache);
  }
  return r;
}

sampling::SamplerParams sampled() {
  sampling::SamplerParams p;
  p.temperature = 0.9f;
  p.top_k = 50;
  return p;
}

TEST(DepthWalk, CachedWalkEqualsPrefixRecomputeAtEveryStep) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    auto m = tiny_model(dir);
    ASSERT_TRUE(m);
    ASSERT_EQ(m->code_predictor().has_projection(), std::string(dir).find("voice_design") != std::string::npos);
    const int64_t V = m->code_predictor().vocab();
    float worst = 0;
    std::set<int32_t> codes_seen;
    for (int32_t c0 : {0, 777, 2047}) {
      for (uint64_t seed : {1ull, 2ull, 3ull, 0xfeedull}) {
        for (bool greedy : {false, true}) {
          auto p = sampled();
          p.greedy = greedy;
          const auto rows = first_rows(*m, static_cast<uint32_t>(seed * 31 + c0), c0);
          auto cache = m->code_predictor().make_cache();
          const WalkResult a = cached_walk(*m, cache, rows, c0, p, seed);
          const WalkResult b = recompute_walk(*m, rows, c0, p, seed);
          for (int64_t k = 0; k + 1 < m->groups(); ++k) {
            const float e = max_abs_diff(a.logits.data() + k * V, b.logits.data() + k * V, V);
            EXPECT_LT(e, 1e-5f) << "step " << k << " c0 " << c0 << " seed " << seed;
            worst = std::max(worst, e);
            // Guard: real logits (not zeros, not constant).
            double sum = 0, sum2 = 0;
            for (int64_t i = 0; i < V; ++i) {
              sum += a.logits[k * V + i];
              sum2 += double(a.logits[k * V + i]) * a.logits[k * V + i];
            }
            EXPECT_GT(sum2 / V - (sum / V) * (sum / V), 0.01) << "step " << k << ": degenerate logits";
          }
          EXPECT_EQ(a.codes, b.codes) << "c0 " << c0 << " seed " << seed << " greedy " << greedy;
          codes_seen.insert(a.codes.begin() + 1, a.codes.end());
        }
      }
    }
    EXPECT_GT(codes_seen.size(), 100u);  // the comparisons cover many different codes
    std::printf("[depth] %s: cached vs recompute max |logit diff| %.2e\n", dir, worst);
  }
}

TEST(DepthWalk, WritesExactlyOneCachePositionPerStep) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    auto m = tiny_model(dir);
    ASSERT_TRUE(m);
    const auto p = sampled();
    const auto rows = first_rows(*m, 9, 1234);
    auto cache = m->code_predictor().make_cache();
    const WalkResult a = cached_walk(*m, cache, rows, 1234, p, 9);
    // Positions 0, 1 (prefill) and one per step for codebooks 1..14: c15 is never fed back.
    EXPECT_EQ(cache.length(), m->groups());
    nn::KvCache ref;
    const WalkResult b = recompute_walk(*m, rows, 1234, p, 9, &ref);
    ASSERT_EQ(a.codes, b.codes);
    ASSERT_EQ(ref.length(), m->groups());
    // Every position holds what a single forward over the whole prefix writes there.
    const int64_t w = cache.row_width();
    for (int64_t l = 0; l < cache.layers(); ++l) {
      EXPECT_LT(max_abs_diff(cache.keys(l), ref.keys(l), size_t(m->groups() * w)), 1e-5f) << "layer " << l;
      EXPECT_LT(max_abs_diff(cache.values(l), ref.values(l), size_t(m->groups() * w)), 1e-5f) << "layer " << l;
    }
  }
}

TEST(DepthWalk, FramesAreIndependentAndBatchingChangesNothing) {
  for (const char* dir : kModels) {
    SCOPED_TRACE(dir);
    auto m = tiny_model(dir);
    ASSERT_TRUE(m);
    const auto p = sampled();
    const auto rows_a = first_rows(*m, 11, 5), rows_b = first_rows(*m, 12, 1900);
    auto fresh = m->code_predictor().make_cache();
    const WalkResult b_alone = cached_walk(*m, fresh, rows_b, 1900, p, 77);
    // Frame A then frame B on one cache: B must not see anything of A.
    auto reused = m->code_predictor().make_cache();
    const WalkResult a = cached_walk(*m, reused, rows_a, 5, p, 76);
    const WalkResult b_after = cached_walk(*m, reused, rows_b, 1900, p, 77);
    EXPECT_NE(a.codes, b_alone.codes);
    EXPECT_EQ(b_after.codes, b_alone.codes);
    EXPECT_EQ(b_after.logits, b_alone.logits);  // bit for bit
    // A and B batched in one walk call.
    auto ca = m->code_predictor().make_cache(), cb = m->code_predictor().make_cache();
    std::vector<int32_t> codes_a(m->groups()), codes_b(m->groups());
    codes_a[0] = 5;
    codes_b[0] = 1900;
    FrameWalk w[2];
    w[0] = {&ca, rows_a.data(), p, {76, 0, 5, 0, 0}, codes_a.data(), nullptr};
    w[1] = {&cb, rows_b.data(), p, {77, 0, 5, 0, 0}, codes_b.data(), nullptr};
    ASSERT_TRUE(m->code_predictor().walk(w, nullptr).ok());
    EXPECT_EQ(codes_a, a.codes);
    EXPECT_EQ(codes_b, b_alone.codes);
  }
}

}  // namespace
}  // namespace chorus::test
