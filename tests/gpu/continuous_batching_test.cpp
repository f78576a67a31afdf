// Continuous batching on the GPU: requests that join a running pool at random frames, leave at
// random frames (end or cancel) and reuse freed slots give exactly the codes they give alone.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "breeze/breeze_test_util.h"
#include "engine/tts_model.h"
#include "generation/golden_cases.h"
#include "nn/kv_pages.h"
#include "gpu_test_util.h"
#include "support/test_support.h"

namespace chorus::gpu_test {
namespace {

using Codes = std::vector<std::vector<int32_t>>;

struct Outcome {
  Codes codes;
  engine::StopReason reason = engine::StopReason::kRunning;
};

std::unique_ptr<engine::TtsModel> load_gpu(const std::string& dir, size_t kv_cache_bytes = 0,
                                           bool batch_invariant = false) {
  engine::LoadOptions o;
  o.device = engine::Device::cuda(0);
  o.kv_cache_bytes = kv_cache_bytes;
  o.batch_invariant = batch_invariant;
  auto m = engine::load_tts_model(dir, o);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Requests that differ in every way a pool must keep apart: speaker, seed, RNG stream, sampler
// (greedy or sampled, with and without a repetition penalty), length and minimum length; for Breeze
// TTS 2 also the guidance (plain, CFG and with `dual` dual CFG, all in one pool: a slot per
// branch) and, with `bf16`, the activation precision (pools of their own; else f32 only).
struct BreezeMix {
  bool dual = false, bf16 = true;
};
std::vector<engine::SynthesisRequest> requests(const engine::ModelInfo& info, int n, uint32_t seed,
                                               BreezeMix mix = {}) {
  std::mt19937 rng(seed);
  std::vector<engine::SynthesisRequest> rs;
  for (int i = 0; i < n; ++i) {
    engine::SynthesisRequest r;
    if (info.family == "breeze-tts") {
      static const nlohmann::json ids = [] {
        std::ifstream in(test::reference_path("breeze_tts2/manifest.json"));
        return nlohmann::json::parse(in)["prompt_token_ids"];
      }();
      r.text_ids = ids["TEXT"].get<std::vector<int32_t>>();
      r.instruct_ids = ids["INSTR"].get<std::vector<int32_t>>();
      if (mix.dual && i % 3 == 2) {
        static const std::vector<std::vector<int32_t>> ref =
            breeze_tts::test::code_frames(breeze_tts::test::Golden("prefill_clone").ids("input_values"));
        r.ref_codes = ref;
        r.ref_text_ids = ids["REF_TEXT"].get<std::vector<int32_t>>();
        r.dual_cfg = std::make_pair(1.5f, 2.0f);
      } else if (i % 2) {
        r.cfg_scale = 2.5f;
      }
      r.activations = i % 4 < 2 || !mix.bf16 ? engine::ActivationPrecision::kF32
                                              : engine::ActivationPrecision::kModelDefault;
    } else {
      r.text_ids = test::prompt_ids().text;
      if (!info.speakers.empty()) r.speaker = info.speakers[rng() % info.speakers.size()];
      r.language = "english";
      if (info.variant == "voice_design") r.instruct_ids = test::prompt_ids().instruct;
    }
    r.max_frames = 4 + static_cast<int64_t>(rng() % 37);
    r.min_frames = rng() % 2 ? r.max_frames : 0;
    r.length_cap.frames_per_token = 0;
    r.seed = 1000 + static_cast<uint64_t>(i);
    r.rng_stream = static_cast<uint32_t>(rng() % 3);
    if (i % 4 == 1) r.sampler.greedy = true;
    if (i % 3 == 2) r.sampler.repetition_penalty = 1.3f;
    rs.push_back(r);
  }
  return rs;
}

Outcome run_alone(const engine::TtsModel& m, const engine::SynthesisRequest& r) {
  Outcome o;
  auto s = m.create_stream(r);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  if (!s.ok()) return o;
  engine::TtsStream* p = s->get();
  std::vector<engine::StepResult> out(1);
  while (!p->finished()) {
    auto st = m.step({&p, 1}, out);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) return o;
    if (out[0].has_frame) o.codes.push_back(out[0].codes);
  }
  o.reason = p->stop_reason();
  return o;
}

// Every request alone, each on a model of its own (a fresh pool: nothing left by another).
std::vector<Outcome> solo_runs(const std::string& dir, const std::vector<engine::SynthesisRequest>& rs,
                               bool batch_invariant) {
  std::vector<Outcome> solo;
  for (const auto& r : rs) {
    auto m = load_gpu(dir, 0, batch_invariant);
    if (!m) return {};
    solo.push_back(run_alone(*m, r));
  }
  return solo;
}

struct Schedule {
  int max_running = 0;
  int cancelled = 0;
  int64_t slots_moved = 0;  // streams moved down into the holes of those that left (frame_pools.h)
  int64_t joined_ahead = 0;  // newcomers whose first frame was launched ahead of the step reading it
  // KV pages: the most in use after a step, and steps whose live streams' worst cases together
  // exceeded `budget_pages` (so some had to wait for pages).
  int64_t peak_pages = 0, budget_pages = 0;
  int over_budget_steps = 0;
};

// The requests arriving at random steps into one model's pools; some are cancelled at a random
// frame. Returns each request's codes and stop reason.
std::vector<Outcome> joined_runs(const engine::TtsModel& m, const std::vector<engine::SynthesisRequest>& rs,
                                 uint32_t seed, Schedule* sched, size_t max_live) {
  std::mt19937 rng(seed);
  std::vector<Outcome> got(rs.size());
  std::vector<std::unique_ptr<engine::TtsStream>> streams(rs.size());
  std::vector<int64_t> cancel_at(rs.size(), -1);
  size_t next = 0;
  std::vector<size_t> live;
  while (next < rs.size() || !live.empty()) {
    // Zero to three newcomers per step; sometimes a burst.
    const size_t arrivals = rng() % 7 == 0 ? 6 : rng() % 4;
    for (size_t a = 0; a < arrivals && next < rs.size() && live.size() < max_live; ++a, ++next) {
      auto s = m.create_stream(rs[next]);
      EXPECT_TRUE(s.ok()) << s.error().to_string();
      if (!s.ok()) return {};
      streams[next] = std::move(s).value();
      if (rng() % 5 == 0) cancel_at[next] = static_cast<int64_t>(rng() % 12);
      live.push_back(next);
    }
    for (size_t i : live)
      if (cancel_at[i] >= 0 && streams[i]->frames() >= cancel_at[i] && !streams[i]->finished()) {
        // Half are cancelled, half simply dropped (a stream destroyed while it runs).
        if (i % 2) streams[i]->cancel();
        else streams[i].reset();
        ++sched->cancelled;
      }
    std::erase_if(live, [&](size_t i) {
      if (!streams[i]) {
        got[i].reason = engine::StopReason::kCancelled;
        return true;
      }
      if (!streams[i]->finished()) return false;
      got[i].reason = streams[i]->stop_reason();
      return true;
    });
    if (live.empty()) continue;
    sched->max_running = std::max(sched->max_running, static_cast<int>(live.size()));
    std::vector<engine::TtsStream*> ptrs;
    for (size_t i : live) ptrs.push_back(streams[i].get());
    std::vector<engine::StepResult> out(ptrs.size());
    engine::StageTimes times;
    auto st = m.step(ptrs, out, &times);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) return {};
    sched->slots_moved += times.slots_moved;
    sched->joined_ahead += times.joined_ahead;
    for (size_t k = 0; k < live.size(); ++k)
      if (out[k].has_frame) got[live[k]].codes.push_back(out[k].codes);
    const auto pages = m.kv_pages();
    EXPECT_TRUE(pages.has_value()) << "the CUDA engines' caches are paged";
    if (pages) {
      EXPECT_GE(pages->free, pages->promised) << "a running stream could not be sure of its pages";
      sched->peak_pages = std::max(sched->peak_pages, pages->total - pages->free);
    }
    int64_t worst = 0;
    for (engine::TtsStream* p : ptrs)
      if (!p->finished()) worst += nn::kv_pages_for(p->prompt_rows() + p->max_frames() + 1);
    sched->over_budget_steps += sched->budget_pages > 0 && worst > sched->budget_pages;
  }
  return got;
}

// After every stream has ended or been cancelled, every KV page and reservation is back.
void expect_pages_returned(const engine::TtsModel& m, const Schedule& sched) {
  const auto pages = m.kv_pages();
  ASSERT_TRUE(pages.has_value());
  EXPECT_EQ(pages->free, pages->total) << "pages still held";
  EXPECT_EQ(pages->promised, 0) << "reservations still held";
  EXPECT_GT(sched.peak_pages, 0) << "no page was ever used";
  std::printf("[gpu pool] KV pages: %lld in the pool (%lld KiB each), at most %lld in use\n",
              static_cast<long long>(pages->total), static_cast<long long>(pages->page_bytes >> 10),
              static_cast<long long>(sched.peak_pages));
}

// `kv_pages`: a KV cache budget of that many pages (0: none), so that streams wait for pages.
// `batch_invariant`: LoadOptions::batch_invariant for the pools and the solo runs; then at least
// `min_running` streams must have run at once (so that layers saw more than 8 rows).
// `account`: the schedule's account, for checks of the caller's own.
void expect_joined_equal_solo(const std::string& model, int n, uint32_t seed, int first_pool = 8,
                              size_t max_live = 1000, int64_t kv_pages = 0, bool batch_invariant = false,
                              int min_running = 0, BreezeMix mix = {}, Schedule* account = nullptr) {
  const std::string dir = test::reference_path(model);
  size_t budget = 0;
  if (kv_pages > 0) {
    auto probe = load_gpu(dir);
    ASSERT_TRUE(probe);
    const auto pages = probe->kv_pages();
    ASSERT_TRUE(pages.has_value());
    budget = static_cast<size_t>(kv_pages * pages->page_bytes);
  }
  auto m = load_gpu(dir, budget, batch_invariant);
  ASSERT_TRUE(m);
  ASSERT_TRUE(m->joins_running_batch());
  const auto rs = requests(m->info(), n, seed, mix);
  const auto solo = solo_runs(dir, rs, batch_invariant);
  ASSERT_EQ(solo.size(), rs.size());
  Schedule sched;
  sched.budget_pages = kv_pages;
  {
    const auto start = m->kv_pages();
    ASSERT_TRUE(start.has_value());
    EXPECT_EQ(start->free, start->total);
    EXPECT_EQ(start->promised, 0);
  }
  const auto got = joined_runs(*m, rs, seed * 7 + 1, &sched, max_live);
  ASSERT_EQ(got.size(), rs.size());
  expect_pages_returned(*m, sched);
  if (kv_pages > 0) {
    EXPECT_LE(sched.peak_pages, kv_pages) << "the budget was exceeded";
    EXPECT_GT(sched.over_budget_steps, 0) << "the budget never made a stream wait";
  }
  size_t frames = 0, distinct = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    frames += solo[i].codes.size();
    distinct += i > 0 && solo[i].codes != solo[i - 1].codes;
    if (got[i].reason == engine::StopReason::kCancelled) {
      ASSERT_LE(got[i].codes.size(), solo[i].codes.size()) << "request " << i;
      EXPECT_TRUE(std::equal(got[i].codes.begin(), got[i].codes.end(), solo[i].codes.begin())) << "request " << i;
      continue;
    }
    EXPECT_EQ(got[i].reason, solo[i].reason) << "request " << i;
    EXPECT_EQ(got[i].codes, solo[i].codes) << "request " << i << " (" << got[i].codes.size() << " vs "
                                           << solo[i].codes.size() << " frames)";
  }
  // Not vacuous: real frames, requests that differ, more streams at once than a first pool holds
  // (so a pool grew), fewer than the requests (so freed slots were reused), and some cancels.
  EXPECT_GT(frames, rs.size() * 4);
  EXPECT_GT(distinct, rs.size() / 2);
  EXPECT_GT(sched.max_running, first_pool);
  EXPECT_GE(sched.max_running, min_running);
  EXPECT_LT(sched.max_running, n);
  EXPECT_GT(sched.cancelled, 0);
  std::printf("[gpu pool] %s: %d requests, %zu frames, at most %d at once, %d cancelled, %lld slots moved, "
              "%lld joined ahead\n", model.c_str(), n, frames, sched.max_running, sched.cancelled,
              static_cast<long long>(sched.slots_moved), static_cast<long long>(sched.joined_ahead));
  if (account) *account = sched;
}

// Streams that leave make holes that streams above them move into: the moved ones too must give
// their solo codes. Newcomers that join while a frame is in flight get their first frame launched
// ahead with the others' next one.
TEST(GpuContinuousBatching, JoinsAndLeavesAtRandomFramesGiveTheSoloCodes) {
  REQUIRE_GPU();
  Schedule sched;
  expect_joined_equal_solo("qwen3_tts/models/tiny_custom_voice", 40, 3, 8, 1000, 0, false, 0, {}, &sched);
  EXPECT_GT(sched.slots_moved, 0) << "no stream moved: the compaction went untested";
  EXPECT_GT(sched.joined_ahead, 0) << "no newcomer's first frame was launched ahead: that path went untested";
}

// A KV budget of a few streams' worst cases: newcomers wait for pages (first come, first served),
// running streams never fail, and every request still gives its solo codes.
TEST(GpuContinuousBatching, StreamsWaitForKvPagesAndGiveTheSoloCodes) {
  REQUIRE_GPU();
  expect_joined_equal_solo("qwen3_tts/models/tiny_custom_voice", 30, 17, /*first_pool=*/4, /*max_live=*/12,
                           /*kv_pages=*/6);
}

// A request that needs more KV pages than the budget allows is refused when it is made.
TEST(GpuContinuousBatching, ARequestLargerThanTheKvBudgetIsRefused) {
  REQUIRE_GPU();
  const std::string dir = test::reference_path("qwen3_tts/models/tiny_custom_voice");
  auto probe = load_gpu(dir);
  ASSERT_TRUE(probe);
  const auto pages = probe->kv_pages();
  ASSERT_TRUE(pages.has_value());
  auto m = load_gpu(dir, static_cast<size_t>(2 * pages->page_bytes));
  ASSERT_TRUE(m);
  auto r = requests(m->info(), 1, 5)[0];
  r.min_frames = 0;
  r.max_frames = 4;
  auto small = m->create_stream(r);
  EXPECT_TRUE(small.ok()) << small.error().to_string();
  r.max_frames = 3 * nn::kKvPagePositions;
  auto large = m->create_stream(r);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.error().code, ErrorCode::kResourceExhausted) << large.error().to_string();
}

TEST(GpuContinuousBatching, VoiceDesignModelToo) {
  REQUIRE_GPU();
  expect_joined_equal_solo("qwen3_tts/models/tiny_voice_design", 30, 11);
}

// Plain and CFG streams in one pool, joined and left at random; at most 2 streams at once, so
// that no layer sees more than 8 rows (a CFG stream is 2 rows, its first depth step 4) and every
// product is f32-accurate (the matrix-vector kernels at 1–2 rows, three-part inputs at 3–8: their
// roundings differ, so only a draw within f32 rounding of a tie could flip). Past that, without
// batch_invariant, a layer takes cuBLAS with two-part inputs, and Breeze's draws then can flip
// (measured: 1 request of 48 at 33 streams). f32 activations only: with bf16 activations such a
// rounding difference now and then flips a bf16 rounding, and that cascades (measured: 2 of 24
// requests when plain and CFG bf16 streams shared a pool); the batch-invariant test covers bf16.
TEST(GpuContinuousBatching, BreezeGuidanceModesToo) {
  REQUIRE_GPU();
  expect_joined_equal_solo("breeze_tts2/models/tiny_breeze", 24, 5, /*first_pool=*/1, /*max_live=*/2,
                           /*kv_pages=*/0, /*batch_invariant=*/false, /*min_running=*/0, BreezeMix{.bf16 = false});
}

// batch_invariant: every row count takes the tensor-core kernel, so requests give their solo codes
// in pools of any size: up to 30 streams at once (a depth first step of 60 rows, pools grown from 8).
TEST(GpuContinuousBatching, BatchInvariantPoolsGiveTheSoloCodesAtAnySize) {
  REQUIRE_GPU();
  expect_joined_equal_solo("qwen3_tts/models/tiny_custom_voice", 60, 23, /*first_pool=*/8, /*max_live=*/30,
                           /*kv_pages=*/0, /*batch_invariant=*/true, /*min_running=*/20);
}

// The same for Breeze's plain, CFG and dual-CFG streams mixed in one pool per activation precision
// (bf16 and f32), up to 24 streams at once (up to 72 slots).
TEST(GpuContinuousBatching, BreezeBatchInvariantPoolsGiveTheSoloCodesAtAnySize) {
  REQUIRE_GPU();
  expect_joined_equal_solo("breeze_tts2/models/tiny_breeze", 48, 29, /*first_pool=*/8, /*max_live=*/24,
                           /*kv_pages=*/0, /*batch_invariant=*/true, /*min_running=*/16, BreezeMix{.dual = true});
}

}  // namespace
}  // namespace chorus::gpu_test
