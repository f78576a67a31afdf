// The device frame loop against the CPU engine and the official goldens (tiny models of
// shared/reference/qwen3_tts): talker logits, greedy codes of all nine cases, batching, seeded
// sampling, and the CUDA engine behind the TtsModel interface.
//
// Near ties: a greedy decision may differ from the golden only where the golden's recorded gap
// between the two best logits is below kNearTie (rounding can flip those); such a decision is
// reported, and the comparison of that stream stops there (later frames depend on it).
#include <cstdio>
#include <map>
#include <optional>

#include "engine/qwen3_tts_engine.h"
#include "engine/tts_model_cuda.h"
#include "generation/golden_cases.h"
#include "gpu_test_util.h"
#include "models/qwen3_tts/frame_batch_cuda.h"
#include "models/qwen3_tts/stream.h"
#include "support/test_support.h"

namespace chorus::gpu_test {
namespace {

namespace q3 = qwen3_tts;
using Frames = std::vector<std::vector<int32_t>>;

constexpr int kFrames = 40;
constexpr float kNearTie = 1e-3f;

std::shared_ptr<const q3::gpu::DeviceModel> device_model(const std::string& dir) {
  static std::map<std::string, std::shared_ptr<const q3::gpu::DeviceModel>> cache;
  auto& m = cache[dir];
  if (!m) {
    auto up = q3::gpu::upload_model(test::tiny_model(dir));
    EXPECT_TRUE(up.ok()) << up.error().to_string();
    if (up.ok()) m = *up;
  }
  return m;
}

q3::GenerationSettings greedy(int frames) {
  q3::GenerationSettings g;
  g.talker.greedy = true;
  g.talker.repetition_penalty = 1.05f;  // the goldens' generation_config value
  g.code_predictor.greedy = true;
  g.max_frames = frames;
  g.min_frames = frames;  // the goldens suppress EOS
  return g;
}

q3::GenerationSettings sampled(int frames, uint64_t seed) {
  q3::GenerationSettings g;
  g.talker = {false, 0.9f, 50, 1.0f, 1.05f};
  g.code_predictor = {false, 0.9f, 50, 1.0f, 1.0f};
  g.max_frames = frames;
  g.min_frames = frames;
  g.seed = seed;
  return g;
}

q3::Prompt prompt_of(const test::GenCase& c) {
  auto p = q3::build_prompt(*test::tiny_model(c.model_dir), c.inputs);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  return p.ok() ? *p : q3::Prompt{};
}

Frames cpu_codes(const test::GenCase& c, const q3::GenerationSettings& g) {
  auto s = q3::Stream::create(test::tiny_model(c.model_dir), prompt_of(c), g);
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return {};
  Frames out;
  q3::Stream* p = s->get();
  std::vector<q3::FrameOutput> fo(1);
  while (!p->finished()) {
    EXPECT_TRUE(q3::step_streams({&p, 1}, fo).ok());
    if (fo[0].has_frame) out.push_back(fo[0].codes);
  }
  return out;
}

// Runs B streams in one device batch for `frames` frames.
std::vector<Frames> gpu_codes(const std::string& model_dir, const std::vector<q3::Prompt>& prompts,
                              const std::vector<q3::GenerationSettings>& settings, int frames,
                              bool split_frames = false, bool ahead = false) {
  std::vector<q3::gpu::StreamSetup> setups;
  std::vector<const q3::Prompt*> ptrs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    setups.push_back({&prompts[i], settings[i]});
    ptrs.push_back(&prompts[i]);
  }
  auto fb = q3::gpu::FrameBatch::create(device_model(model_dir), setups);
  EXPECT_TRUE(fb.ok()) << fb.error().to_string();
  if (!fb.ok()) return {};
  (*fb)->set_split_frames(split_frames);
  auto st = (*fb)->prefill(ptrs);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  std::vector<Frames> out(prompts.size());
  for (int f = 0; f < frames && st.ok(); ++f) {
    // ahead: the next frame is launched before this one is waited for, as the engines do.
    const bool feed = f + 1 < frames;
    st = (*fb)->run_frame(feed, ahead && feed ? std::optional<bool>(f + 2 < frames) : std::nullopt);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    for (size_t b = 0; b < prompts.size(); ++b) {
      EXPECT_EQ((*fb)->error(static_cast<int>(b)), 0);
      const int32_t* c = (*fb)->frame_codes(static_cast<int>(b));
      out[b].emplace_back(c, c + 16);
    }
  }
  return out;
}

struct Agreement {
  int decisions = 0;     // compared before the first difference (or all)
  bool near_tie = false; // the first difference sits at a near tie
  bool differs = false;
};

// Compares `ours` with the golden codes decision by decision, in generation order (c0, then c1..c15).
Agreement against_golden(const test::GenCase& c, const Frames& ours) {
  Agreement a;
  const auto codes = c.golden.i32("codes");
  const auto tm = c.golden.f32("talker_chosen_margin"), cm = c.golden.f32("cp_chosen_margin");
  for (int f = 0; f < kFrames && f < static_cast<int>(ours.size()); ++f)
    for (int k = 0; k < 16; ++k) {
      if (ours[f][k] != codes[f * 16 + k]) {
        const float margin = k == 0 ? tm[f] : cm[f * 15 + k - 1];
        a.differs = true;
        a.near_tie = margin < kNearTie;
        std::printf("  %s: frame %d codebook %d: ours %d, golden %d (golden margin %.2e)\n", c.id.c_str(), f, k,
                    ours[f][k], codes[f * 16 + k], margin);
        return a;
      }
      ++a.decisions;
    }
  return a;
}

TEST(GpuGolden, TalkerPrefillMatchesTheOfficialLogits) {
  REQUIRE_GPU();
  const std::pair<const char*, const char*> runs[] = {{"prefill_custom_voice", "models/tiny_custom_voice"},
                                                      {"prefill_voice_design", "models/tiny_voice_design"},
                                                      {"prefill_base", "models/tiny_base"}};
  for (const auto& [name, dir] : runs) {
    SCOPED_TRACE(name);
    const test::Golden g = test::load_golden(std::string("goldens/") + name + ".safetensors");
    auto dm = device_model(dir);
    ASSERT_TRUE(dm);
    const auto x = g.f32("prefill_embeds"), want_h = g.f32("last_hidden_state"), want_l = g.f32("logits");
    const int64_t P = g.shape("prefill_embeds")[0], H = dm->hidden(), V = dm->vocab();
    const nn::Qwen3Dims& d = dm->talker().dims();
    auto scratch = q3::gpu::StackScratch::create(d, P);
    auto ws = cuda::LinearWorkspace::create(P, dm->talker().max_linear_k(), std::max(dm->talker().max_linear_n_total(), V));
    ASSERT_TRUE(scratch.ok() && ws.ok());
    ASSERT_TRUE(cuda::attention_reserve(P, d.head_dim).ok());
    auto kv = to_device(std::vector<float>(q3::gpu::KvCacheRef::floats(d.layers, 1, P, d.kv_heads * d.head_dim)));
    std::vector<int32_t> seq(P, 0), pos(P);
    for (int64_t t = 0; t < P; ++t) pos[t] = static_cast<int32_t>(t);
    auto dh = to_device(x), dseq = to_device(seq), dpos = to_device(pos);
    auto dout = poisoned(P * H), dlog = poisoned(P * V);
    const q3::gpu::KvCacheRef ref{kv.as<float>(), 1, P, d.kv_heads * d.head_dim};
    ASSERT_TRUE(dm->talker().forward(dh.as<float>(), dout.as<float>(), {dseq.as<int32_t>(), dpos.as<int32_t>(), P, false}, ref,
                                     *scratch, *ws, nullptr).ok());
    cuda::LinearArgs head;
    head.x = dout.as<float>();
    head.ldx = H;
    head.M = P;
    head.out[0] = {dm->codec_head().matrix(), nullptr, dlog.as<float>(), V};
    ASSERT_TRUE(cuda::linear(head, &*ws, nullptr).ok());
    const auto h = to_host<float>(dout, P * H), l = to_host<float>(dlog, P * V);
    const float eh = test::max_abs_diff(h.data(), want_h.data(), want_h.size());
    const float el = test::max_abs_diff(l.data(), want_l.data(), want_l.size());
    EXPECT_LT(eh, 1e-4f);
    EXPECT_LT(el, 1e-4f);
    std::printf("[gpu talker] %-22s %2lld positions: hidden max |err| %.2e, logits max |err| %.2e\n", name, (long long)P, eh, el);
  }
}

TEST(GpuGolden, GreedyCodesOfEveryCaseMatchTheGoldensAndTheCpu) {
  REQUIRE_GPU();
  ASSERT_EQ(test::gen_cases().size(), 9u);
  int exact = 0, ties = 0;
  for (const auto& c : test::gen_cases()) {
    SCOPED_TRACE(c->id);
    const auto gpu = gpu_codes(c->model_dir, {prompt_of(*c)}, {greedy(kFrames)}, kFrames);
    ASSERT_EQ(gpu.size(), 1u);
    ASSERT_EQ(gpu[0].size(), size_t(kFrames));
    const Agreement a = against_golden(*c, gpu[0]);
    EXPECT_TRUE(!a.differs || a.near_tie) << "a decision away from any near tie differs from the golden";
    exact += !a.differs;
    ties += a.differs && a.near_tie;
    const Frames cpu = cpu_codes(*c, greedy(kFrames));
    const Agreement b = against_golden(*c, cpu);
    if (!a.differs && !b.differs) {
      EXPECT_EQ(gpu[0], cpu);
    }
    std::printf("[gpu greedy] %-36s gpu: %d/%d decisions equal the golden%s; cpu: %d%s\n", c->id.c_str(), a.decisions,
                kFrames * 16, a.differs ? " (then a near tie)" : "", b.decisions, b.differs ? " (then a near tie)" : "");
  }
  std::printf("[gpu greedy] %d of 9 cases equal over all 640 decisions, %d stop at a near tie\n", exact, ties);
  EXPECT_GE(exact, 5);  // guard: the comparison is not vacuously excused by near ties
}

TEST(GpuGolden, StreamsOfOneBatchEqualTheirSingleRuns) {
  REQUIRE_GPU();
  std::map<std::string, std::vector<const test::GenCase*>> by_model;
  for (const auto& c : test::gen_cases()) by_model[c->model_dir].push_back(c.get());
  for (const auto& [dir, cases] : by_model) {
    SCOPED_TRACE(dir);
    std::vector<q3::Prompt> prompts;
    std::vector<q3::GenerationSettings> settings;
    for (const auto* c : cases) {
      prompts.push_back(prompt_of(*c));
      settings.push_back(sampled(kFrames, 7));
    }
    const auto together = gpu_codes(dir, prompts, settings, kFrames);
    ASSERT_EQ(together.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto alone = gpu_codes(dir, {prompts[i]}, {settings[i]}, kFrames);
      ASSERT_EQ(alone.size(), 1u);
      EXPECT_EQ(together[i], alone[0]) << cases[i]->id;
    }
  }
}

// 20 streams: the matrix products of the talker and of the code predictor's first pass run on the
// tensor-core path (more than kGemvMaxRows rows).
TEST(GpuGolden, LargeBatchKeepsTheGreedyCodes) {
  REQUIRE_GPU();
  const auto& c = *test::gen_cases()[0];
  const int B = 20;
  std::vector<q3::Prompt> prompts(B, prompt_of(c));
  std::vector<q3::GenerationSettings> settings(B, greedy(kFrames));
  const auto out = gpu_codes(c.model_dir, prompts, settings, kFrames);
  ASSERT_EQ(out.size(), size_t(B));
  int exact = 0;
  for (int b = 0; b < B; ++b) {
    const Agreement a = against_golden(c, out[b]);
    EXPECT_TRUE(!a.differs || a.near_tie) << "stream " << b;
    exact += !a.differs;
  }
  std::printf("[gpu batch 20] %d of %d streams equal the golden over all 640 decisions\n", exact, B);
}

// A frame as one graph (the default) and as two: the frame's codes are saved on the device at the
// seam in one, copied out there in the other; every code must agree (gpu_codes also checks that no
// stream reports an error).
// Three streams of case `c` sampled with seeds 1, 2, 3.
struct SeededStreams {
  std::vector<q3::Prompt> prompts;
  std::vector<q3::GenerationSettings> settings;
};
SeededStreams seeded_streams(const test::GenCase& c) {
  SeededStreams r;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    r.prompts.push_back(prompt_of(c));
    r.settings.push_back(sampled(kFrames, seed));
  }
  return r;
}

TEST(GpuGolden, OneGraphPerFrameEqualsTwo) {
  REQUIRE_GPU();
  const auto& c = *test::gen_cases()[0];
  const auto [prompts, settings] = seeded_streams(c);
  const auto whole = gpu_codes(c.model_dir, prompts, settings, kFrames, false);
  const auto split = gpu_codes(c.model_dir, prompts, settings, kFrames, true);
  ASSERT_EQ(whole.size(), 3u);
  ASSERT_EQ(split.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(whole[i].size(), size_t(kFrames));
    EXPECT_EQ(whole[i], split[i]) << "seed " << i + 1;
  }
  EXPECT_NE(whole[0], whole[1]);  // seeds matter: the comparison is not of constants
}

// Frames launched ahead of the host (cuda::FramePipeline) give the codes of frames run one by one,
// with one graph per frame and with two.
TEST(GpuGolden, FramesLaunchedAheadEqualOneByOne) {
  REQUIRE_GPU();
  const auto& c = *test::gen_cases()[0];
  const auto [prompts, settings] = seeded_streams(c);
  const auto one_by_one = gpu_codes(c.model_dir, prompts, settings, kFrames);
  ASSERT_EQ(one_by_one.size(), 3u);
  for (const bool split : {false, true}) {
    const auto ahead = gpu_codes(c.model_dir, prompts, settings, kFrames, split, true);
    ASSERT_EQ(ahead.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(one_by_one[i].size(), size_t(kFrames));
      EXPECT_EQ(ahead[i], one_by_one[i]) << "seed " << i + 1 << (split ? ", two graphs per frame" : "");
    }
  }
  EXPECT_NE(one_by_one[0], one_by_one[1]);  // seeds matter: the comparison is not of constants
}

TEST(GpuGolden, SeededSamplingEqualsTheCpu) {
  REQUIRE_GPU();
  for (size_t ci : {size_t{0}, size_t{3}, size_t{5}}) {
    const auto& c = *test::gen_cases()[ci];
    SCOPED_TRACE(c.id);
    std::vector<q3::Prompt> prompts;
    std::vector<q3::GenerationSettings> settings;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      prompts.push_back(prompt_of(c));
      settings.push_back(sampled(kFrames, seed));
    }
    const auto gpu = gpu_codes(c.model_dir, prompts, settings, kFrames);
    ASSERT_EQ(gpu.size(), 4u);
    int equal = 0;
    for (size_t i = 0; i < 4; ++i) {
      const Frames cpu = cpu_codes(c, settings[i]);
      ASSERT_EQ(cpu.size(), size_t(kFrames));
      equal += gpu[i] == cpu;
      EXPECT_EQ(gpu[i], cpu) << "seed " << i + 1;
    }
    EXPECT_NE(gpu[0], gpu[1]);  // seeds matter: the comparison is not of constants
    std::printf("[gpu sampled] %-36s %d of 4 seeds give the CPU's codes\n", c.id.c_str(), equal);
  }
}

TEST(GpuEngine, CudaEngineGivesTheCpuEnginesFramesAndStops) {
  REQUIRE_GPU();
  const std::string dir = test::reference_path("qwen3_tts/models/tiny_custom_voice");
  auto cpu = engine::Qwen3TtsEngine::load(dir, nullptr);
  auto gpu = engine::load_tts_model(dir, {.device = engine::Device::cuda(0)});
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  for (int min_frames : {25, 0}) {  // 0: EOS may end the stream early
    engine::SynthesisRequest r;
    r.text_ids = test::prompt_ids().text;
    r.speaker = "ryan";
    r.language = "english";
    r.max_frames = 25;
    r.min_frames = min_frames;
    r.length_cap.frames_per_token = 0;
    r.seed = 5;
    std::vector<std::vector<int32_t>> want, got;
    engine::StopReason want_reason{}, got_reason{};
    for (int which = 0; which < 2; ++which) {
      const engine::TtsModel& m = which == 0 ? static_cast<const engine::TtsModel&>(**cpu) : **gpu;
      auto s = m.create_stream(r);
      ASSERT_TRUE(s.ok()) << s.error().to_string();
      engine::TtsStream* p = s->get();
      std::vector<engine::StepResult> out(1);
      auto& frames = which == 0 ? want : got;
      while (!p->finished()) {
        auto st = m.step({&p, 1}, out);
        ASSERT_TRUE(st.ok()) << st.error().to_string();
        if (out[0].has_frame) frames.push_back(out[0].codes);
      }
      (which == 0 ? want_reason : got_reason) = p->stop_reason();
    }
    if (min_frames > 0) {
      EXPECT_EQ(want.size(), 25u);
    }
    EXPECT_EQ(got, want) << "min_frames " << min_frames;
    EXPECT_EQ(got_reason, want_reason);
  }
}

}  // namespace
}  // namespace chorus::gpu_test
