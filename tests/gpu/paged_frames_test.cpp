// A frame pool whose talker caches are paged against the same pool with contiguous caches, driven
// through the same schedule as the engines drive it (device_batch.h step_pooled_streams): streams
// that join later into freed slots, leave, and frames launched ahead. Paging changes only where
// the keys and values live, so every stream's codes must be bit-identical, over lengths that cross
// several page boundaries; and every page must come back.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "engine/qwen3_tts_engine.h"
#include "generation/golden_cases.h"
#include "gpu_test_util.h"
#include "models/qwen3_tts/frame_batch_cuda.h"
#include "nn/kv_page_pool_cuda.h"
#include "support/test_support.h"

namespace chorus::gpu_test {
namespace {

namespace q3 = qwen3_tts;
using Codes = std::vector<std::vector<int32_t>>;
using Pool = q3::gpu::FrameBatch;

struct Plan {
  int join_step = 0;  // the stream arrives at this step (and waits for a free slot)
  q3::Prompt prompt;
  q3::GenerationSettings settings;
};

struct StreamState {
  int slot = -1;
  int64_t made = 0;
  bool done = false;
};

// Steps the plans through one pool of `slots` slots as step_pooled_streams does. `pages`: the
// talker caches are paged (the pool's reservations are made here, as the engine makes them).
std::vector<Codes> run_pool(const std::shared_ptr<const q3::gpu::DeviceModel>& dm, std::vector<Plan>& plans, int slots,
                            const std::shared_ptr<nn::gpu::KvPagePool>& pages, int64_t* peak_pages) {
  auto made_pool = Pool::create_pool(dm, slots, 1024, pages);
  EXPECT_TRUE(made_pool.ok()) << made_pool.error().to_string();
  if (!made_pool.ok()) return {};
  Pool& fb = **made_pool;
  const int G = dm->groups();
  std::vector<Codes> out(plans.size());
  std::vector<StreamState> st(plans.size());
  std::vector<int> owner(static_cast<size_t>(slots), -1);
  const auto finish = [&](size_t i) {
    st[i].done = true;
    owner[static_cast<size_t>(st[i].slot)] = -1;
    fb.release_slot(st[i].slot);
  };
  // One frame for the streams `act`, launched ahead when `ahead_ok`, delivered as the engine does.
  const auto frame = [&](const std::vector<size_t>& act, bool ahead_ok) -> bool {
    bool feed = false, feed_after = false;
    for (size_t i : act) {
      feed = feed || st[i].made + 1 < plans[i].settings.max_frames;
      feed_after = feed_after || st[i].made + 2 < plans[i].settings.max_frames;
    }
    fb.set_active_slots(slots);
    const Status s = fb.run_frame(feed, feed && ahead_ok ? std::optional<bool>(feed_after) : std::nullopt);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    if (!s.ok()) return false;
    for (size_t i : act) {
      EXPECT_EQ(fb.error(st[i].slot), 0);
      const int32_t* c = fb.frame_codes(st[i].slot);
      out[i].emplace_back(c, c + G);
      if (++st[i].made >= plans[i].settings.max_frames) finish(i);
    }
    return true;
  };
  for (int step = 0; step < 100000; ++step) {
    std::vector<size_t> running, joiners;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (st[i].done) continue;
      if (st[i].slot >= 0) {
        running.push_back(i);
        continue;
      }
      if (plans[i].join_step > step) continue;
      const auto free_slot = std::find(owner.begin(), owner.end(), -1);
      if (free_slot == owner.end()) continue;
      st[i].slot = static_cast<int>(free_slot - owner.begin());
      *free_slot = static_cast<int>(i);
      if (pages) {
        const int64_t n = Pool::kv_pages_for_stream(plans[i].prompt.prefill_rows + plans[i].settings.max_frames, 1);
        auto reserved = pages->reserve(n);
        EXPECT_TRUE(reserved.ok() && *reserved);
        EXPECT_TRUE(fb.hold_pages(st[i].slot, n).ok());
      }
      joiners.push_back(i);
    }
    if (running.empty() && joiners.empty()) {
      if (std::all_of(st.begin(), st.end(), [](const StreamState& s) { return s.done; })) break;
      continue;  // a stream not yet arrived
    }
    bool ran = false;
    if (!running.empty() && (joiners.empty() || fb.frame_ahead())) {
      if (!frame(running, joiners.empty())) return {};
      ran = true;
    }
    if (!joiners.empty()) {
      EXPECT_TRUE(fb.settle().ok());
      std::vector<int> at;
      std::vector<q3::gpu::StreamSetup> setups;
      for (size_t i : joiners) {
        at.push_back(st[i].slot);
        setups.push_back({&plans[i].prompt, plans[i].settings});
      }
      fb.set_active_slots(slots);
      const Status s = fb.admit(at, setups);
      EXPECT_TRUE(s.ok()) << s.error().to_string();
      if (!s.ok()) return {};
    }
    if (!ran) {
      std::vector<size_t> act = running;
      act.insert(act.end(), joiners.begin(), joiners.end());
      if (!frame(act, true)) return {};
    }
    if (pages) {
      const nn::KvPageStats ps = pages->stats();
      EXPECT_GE(ps.free, ps.promised);
      *peak_pages = std::max(*peak_pages, ps.total - ps.free);
    }
  }
  if (pages) {  // while the pool still lives: its streams' ends gave everything back
    const nn::KvPageStats ps = pages->stats();
    EXPECT_EQ(ps.free, ps.total) << "pages still held";
    EXPECT_EQ(ps.promised, 0) << "reservations still held";
  }
  return out;
}

TEST(GpuPagedKv, PagedPoolEqualsTheContiguousPool) {
  REQUIRE_GPU();
  const std::string dir = test::reference_path("qwen3_tts/models/tiny_custom_voice");
  auto cpu = engine::Qwen3TtsEngine::load(dir, nullptr);
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  const std::shared_ptr<const q3::Model> model(std::shared_ptr<const q3::Model>(), &(*cpu)->model());
  auto dm = q3::gpu::upload_model(model);
  ASSERT_TRUE(dm.ok()) << dm.error().to_string();
  // Lengths that cross page boundaries (64, 128 and 192 positions with the prompt); two slots for
  // four streams, so later streams take the slots (and pages) of earlier ones.
  const int frames[] = {150, 70, 130, 90}, joins[] = {0, 0, 30, 100};
  std::vector<Plan> plans;
  for (int i = 0; i < 4; ++i) {
    engine::SynthesisRequest r;
    r.text_ids = test::prompt_ids().text;
    r.speaker = (*cpu)->info().speakers[static_cast<size_t>(i) % (*cpu)->info().speakers.size()];
    r.language = "english";
    r.max_frames = r.min_frames = frames[i];
    r.length_cap.frames_per_token = 0;
    r.seed = 21 + static_cast<uint64_t>(i);
    r.rng_stream = static_cast<uint32_t>(i % 2);
    if (i == 1) r.sampler.greedy = true;
    auto in = (*cpu)->prompt_inputs(r);
    ASSERT_TRUE(in.ok()) << in.error().to_string();
    auto prompt = q3::build_prompt(*model, *in);
    ASSERT_TRUE(prompt.ok()) << prompt.error().to_string();
    Plan p{joins[i], std::move(prompt).value(), (*cpu)->settings(r)};
    p.settings.max_frames = frames[i];
    plans.push_back(std::move(p));
  }
  int64_t unused = 0, peak = 0;
  std::vector<Plan> plans2 = plans;
  const auto contiguous = run_pool(*dm, plans, 2, nullptr, &unused);
  const nn::Qwen3Dims& d = (*dm)->talker().dims();
  auto pages = nn::gpu::KvPagePool::create(d.layers, (*dm)->talker().kv_width());
  ASSERT_TRUE(pages.ok());
  const auto paged = run_pool(*dm, plans2, 2, *pages, &peak);
  ASSERT_EQ(contiguous.size(), 4u);
  ASSERT_EQ(paged.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(contiguous[i].size(), static_cast<size_t>(frames[i])) << "stream " << i;
    EXPECT_EQ(paged[i], contiguous[i]) << "stream " << i;
  }
  // Not vacuous: streams differ, and more pages than one stream's were in use at once.
  EXPECT_NE(contiguous[0], contiguous[2]);
  EXPECT_GT(peak, 3);
  const nn::KvPageStats ps = (*pages)->stats();
  std::printf("[gpu paged] 4 streams through 2 slots: %lld pages at most in use, %lld in the pool\n",
              static_cast<long long>(peak), static_cast<long long>(ps.total));
}

}  // namespace
}  // namespace chorus::gpu_test
