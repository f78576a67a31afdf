// The depth decoder against the goldens: the indexing probe (recompute and cached logits), every
// frame of every generation case walked greedily from the golden backbone hidden states with CFG /
// dual CFG combined at every step (through the shared sampler), the cached walk equal to the
// recompute reference, and frame independence.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/depth_decoder.h"
#include "sampling/sampler.h"

namespace chorus::breeze_tts {
namespace {

constexpr int64_t V = 2051;
constexpr double kLogitTol = 5e-5;

struct Fixture {
  ModelFiles files;
  DepthDecoder depth;
  nlohmann::json manifest;
};

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto files = open_model_files(test::tiny_model_dir());
    if (!files.ok()) throw std::runtime_error(files.error().to_string());
    auto d = DepthDecoder::load(files->config, files->main);
    if (!d.ok()) throw std::runtime_error(d.error().to_string());
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    return new Fixture{std::move(*files), std::move(*d), nlohmann::json::parse(in)};
  }();
  return *f;
}

// A picker that replays given codes (so the walk follows a known sequence).
DepthPicker replay(const int32_t* codes) {
  return [codes](int64_t k, std::span<const float>) -> Result<int32_t> { return codes[k]; };
}

TEST(BreezeDepth, ProbeRecomputeAndCachedWalkMatchTheGolden) {
  const auto& f = fixture();
  test::Golden g("depth_decoder");
  const Tensor h = g.f32("backbone_hidden");
  const std::vector<int32_t> ids = g.ids("input_ids");  // [0, c0, ..., c14]
  ASSERT_EQ(ids.size(), 16u);
  const std::vector<int32_t> codes(ids.begin() + 1, ids.end());  // c0..c14
  std::vector<float> recompute(15 * V), cached(15 * V);
  ASSERT_TRUE(f.depth.recompute(h.f32(), codes, recompute.data(), nullptr).ok());
  std::vector<int32_t> frame(16);
  std::copy(codes.begin(), codes.end(), frame.begin());
  nn::KvCache cache = f.depth.make_cache();
  const DepthBranch br{&cache, h.f32()};
  ASSERT_TRUE(f.depth.walk({&br, 1}, frame.data(), replay(frame.data()), nullptr, cached.data()).ok());
  const double e_re = test::max_abs_diff(recompute.data(), g.f32("logits_recompute").f32(), 15 * V);
  const double e_ca = test::max_abs_diff(cached.data(), g.f32("logits_cached").f32(), 15 * V);
  const double e_self = test::max_abs_diff(cached.data(), recompute.data(), 15 * V);
  EXPECT_LE(e_re, kLogitTol);
  EXPECT_LE(e_ca, kLogitTol);
  EXPECT_LE(e_self, 1e-5);
  std::printf("[ probe ] max |diff|: recompute %.3g, cached %.3g, cached vs our recompute %.3g\n", e_re, e_ca, e_self);
}

// Greedy pick of the guided logits, reserved ids masked, through the shared sampler.
struct GuidedGreedy {
  std::string mode;
  float s = 1, s_ref = 0, s_ins = 0;
  int64_t codec_size = 2048;
  std::vector<float>* combined_out = nullptr;  // the last combined logits
  Result<int32_t> operator()(int64_t, std::span<const float> b) const {
    std::vector<float> l(V);
    for (int64_t i = 0; i < V; ++i) {
      if (mode == "none") l[i] = b[i];
      else if (mode == "cfg") l[i] = b[V + i] + s * (b[i] - b[V + i]);  // cond, uncond
      else l[i] = b[i] + s_ref * (b[V + i] - b[i]) + s_ins * (b[2 * V + i] - b[i]);  // uncond, ref, ins
    }
    if (combined_out) *combined_out = l;
    sampling::LogitRules rules;
    rules.allowed_below = codec_size;
    sampling::SamplerParams p;
    p.greedy = true;
    return sampling::sample(l, rules, p, {});
  }
};

TEST(BreezeDepth, EveryFrameOfEveryCaseWalksToTheGoldenCodes) {
  const auto& f = fixture();
  for (const auto& cs : f.manifest["cases"]) {
    const std::string id = cs["id"], mode = cs["mode"];
    SCOPED_TRACE(id);
    test::Golden g("gen_" + id);
    std::vector<std::string> names = mode == "dual" ? std::vector<std::string>{"uncond", "ref", "ins"}
                                     : mode == "cfg" ? std::vector<std::string>{"cond", "uncond"}
                                                     : std::vector<std::string>{"cond"};
    GuidedGreedy pick;
    pick.mode = mode;
    if (mode == "cfg") pick.s = cs["cfg_scale"].get<float>();
    if (mode == "dual") pick.s_ref = cs["dual_cfg_scales"][0].get<float>(), pick.s_ins = cs["dual_cfg_scales"][1].get<float>();
    std::vector<Tensor> hidden;
    std::vector<nn::KvCache> caches;
    for (const auto& b : names) {
      hidden.push_back(g.f32(b + "_hidden"));
      caches.push_back(f.depth.make_cache());
    }
    const std::vector<int32_t> codes = g.ids("codes");
    const Tensor margins = g.f32("depth_margin");
    const int64_t F = static_cast<int64_t>(codes.size()) / 16;
    int mismatches = 0, near_ties = 0;
    double worst_frame0 = 0;
    for (int64_t t = 0; t < F; ++t) {
      std::vector<DepthBranch> br;
      for (size_t i = 0; i < names.size(); ++i) br.push_back({&caches[i], hidden[i].f32() + t * 64});
      std::vector<int32_t> frame(16, -1);
      frame[0] = codes[static_cast<size_t>(t * 16)];
      std::vector<float> logits(15 * names.size() * V);
      ASSERT_TRUE(f.depth.walk(br, frame.data(), pick, &ThreadPool::global(), logits.data()).ok());
      for (int64_t k = 1; k < 16; ++k) {
        if (frame[static_cast<size_t>(k)] == codes[static_cast<size_t>(t * 16 + k)]) continue;
        // A legitimate divergence only at a recorded near-tie.
        if (margins.f32()[t * 15 + k - 1] < 1e-4f) ++near_ties;
        else ++mismatches;
        break;  // later codes follow a different prefix
      }
      if (t == 0) {
        for (size_t i = 0; i < names.size(); ++i) {
          const Tensor want = g.f32(names[i] + "_depth_frame0_logits_cached");
          for (int64_t k = 0; k < 15; ++k)
            worst_frame0 = std::max(worst_frame0, test::max_abs_diff(logits.data() + (k * names.size() + i) * V,
                                                                     want.f32() + k * V, V));
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_LE(worst_frame0, kLogitTol);
    std::printf("[ %-18s ] %d frames x 15 depth codes: mismatches %d (near-ties %d); frame-0 branch logits max |diff| %.3g\n",
                id.c_str(), static_cast<int>(F), mismatches, near_ties, worst_frame0);
  }
}

TEST(BreezeDepth, FramesAreIndependentOfEachOther) {
  const auto& f = fixture();
  test::Golden g("gen_plain");
  const Tensor h = g.f32("cond_hidden");
  const std::vector<int32_t> codes = g.ids("codes");
  GuidedGreedy pick;
  pick.mode = "none";
  auto run = [&](nn::KvCache& cache, int64_t t, std::vector<float>* logits) {
    std::vector<int32_t> frame(16, -1);
    frame[0] = codes[static_cast<size_t>(t * 16)];
    const DepthBranch br{&cache, h.f32() + t * 64};
    EXPECT_TRUE(f.depth.walk({&br, 1}, frame.data(), pick, nullptr, logits->data()).ok());
    return frame;
  };
  nn::KvCache shared = f.depth.make_cache(), fresh = f.depth.make_cache();
  std::vector<float> first(15 * V), between(15 * V), again(15 * V), alone(15 * V);
  const auto a1 = run(shared, 3, &first);
  const auto b = run(shared, 17, &between);  // an unrelated frame in between
  const auto a2 = run(shared, 3, &again);
  const auto a3 = run(fresh, 3, &alone);
  EXPECT_NE(a1, b);
  EXPECT_EQ(a1, a2);
  EXPECT_EQ(a1, a3);
  EXPECT_EQ(first, again);  // bit for bit
  EXPECT_EQ(first, alone);
}

TEST(BreezeDepth, CachedWalkEqualsRecomputeOnEveryPlainFrame) {
  const auto& f = fixture();
  test::Golden g("gen_clone");
  const Tensor h = g.f32("cond_hidden");
  const std::vector<int32_t> codes = g.ids("codes");
  nn::KvCache cache = f.depth.make_cache();
  double worst = 0;
  for (int64_t t = 0; t < 30; t += 7) {
    const int32_t* frame = codes.data() + t * 16;
    std::vector<int32_t> walked(frame, frame + 16);
    std::vector<float> cached(15 * V), recompute(15 * V);
    const DepthBranch br{&cache, h.f32() + t * 64};
    ASSERT_TRUE(f.depth.walk({&br, 1}, walked.data(), replay(frame), nullptr, cached.data()).ok());
    ASSERT_TRUE(f.depth.recompute(h.f32() + t * 64, {frame, 15}, recompute.data(), nullptr).ok());
    worst = std::max(worst, test::max_abs_diff(cached.data(), recompute.data(), 15 * V));
  }
  EXPECT_LE(worst, 1e-5);
  std::printf("[ cached vs recompute ] max |diff| %.3g\n", worst);
}

TEST(BreezeDepth, BadInputsAreErrors) {
  const auto& f = fixture();
  std::vector<float> h(64, 0.1f), logits(15 * V);
  std::vector<int32_t> frame(16, 0);
  frame[0] = 2051;
  nn::KvCache cache = f.depth.make_cache();
  const DepthBranch br{&cache, h.data()};
  EXPECT_FALSE(f.depth.walk({&br, 1}, frame.data(), replay(frame.data()), nullptr).ok());
  EXPECT_FALSE(f.depth.walk({}, frame.data(), replay(frame.data()), nullptr).ok());
  const DepthBranch no_cache{nullptr, h.data()};
  frame[0] = 5;
  EXPECT_FALSE(f.depth.walk({&no_cache, 1}, frame.data(), replay(frame.data()), nullptr).ok());
  EXPECT_FALSE(f.depth.recompute(h.data(), std::vector<int32_t>(16, 0), logits.data(), nullptr).ok());
  EXPECT_FALSE(f.depth.recompute(h.data(), std::vector<int32_t>{-1}, logits.data(), nullptr).ok());
}

}  // namespace
}  // namespace chorus::breeze_tts
