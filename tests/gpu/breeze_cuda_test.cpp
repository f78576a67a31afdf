// The Breeze TTS 2 device frame loop (models/breeze_tts/frame_batch_cuda.h) against the goldens of
// shared/reference/breeze_tts2 and the CPU backend: greedy codes of every gen_* case, the raw backbone
// and depth logits of every guidance branch, and the CUDA engine against the CPU engine.
//
// Near ties: a greedy decision may differ from the golden only where the golden's recorded margin
// (backbone_margin / depth_margin) is below kNearTie; such a divergence is reported and the case
// stops being compared there (later frames follow another history).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "breeze/breeze_test_util.h"
#include "engine/tts_model.h"
#include "engine/tts_model_cuda.h"
#include "gpu_test_util.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/frame_batch_cuda.h"
#include "models/breeze_tts/generation.h"

namespace chorus::gpu_test {
namespace {

namespace bt = breeze_tts;

// As the Qwen3 GPU test: prompts of more than 8 rows go through the tensor-core path (inputs split
// into two bf16 parts, ~2e-4 relative per product), so decisions closer than this may flip.
constexpr float kNearTie = 1e-3f;
// Same bf16 weights, f32 activations on both sides; only summation orders and the split-input
// tensor-core products differ. Far below bf16 resolution (2^-8); a wrong head, table slot, RoPE or
// cache position gives errors of order 1.
constexpr double kLogitRelTol = 1e-3;

struct Fixture {
  bt::ModelFiles files;
  bt::BreezeModel model;
  std::shared_ptr<const bt::gpu::DeviceModel> dev;
  nlohmann::json manifest;
  bt::PromptParts parts;
};

const Fixture* fixture() {
  static const Fixture* f = [] () -> const Fixture* {
    auto files = bt::open_model_files(bt::test::tiny_model_dir());
    EXPECT_TRUE(files.ok()) << files.error().to_string();
    if (!files.ok()) return nullptr;
    auto model = bt::BreezeModel::load(*files);
    EXPECT_TRUE(model.ok()) << model.error().to_string();
    if (!model.ok()) return nullptr;
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    auto* fx = new Fixture{std::move(*files), std::move(*model), nullptr, nlohmann::json::parse(in), {}};
    auto dev = bt::gpu::DeviceModel::upload(fx->files.config, fx->files.main);
    EXPECT_TRUE(dev.ok()) << dev.error().to_string();
    if (!dev.ok()) return nullptr;
    fx->dev = *dev;
    const auto& ids = fx->manifest["prompt_token_ids"];
    fx->parts.text = ids["TEXT"].get<std::vector<int32_t>>();
    fx->parts.instruct = ids["INSTR"].get<std::vector<int32_t>>();
    fx->parts.ref_text = ids["REF_TEXT"].get<std::vector<int32_t>>();
    fx->parts.ref.codes = bt::test::Golden("prefill_clone").ids("input_values");
    fx->parts.ref.frames = static_cast<int64_t>(fx->parts.ref.codes.size()) / 16;
    return fx;
  }();
  return f;
}

bt::Layout layout_of(const std::string& name) {
  if (name == "plain") return bt::Layout::kPlain;
  if (name == "clone") return bt::Layout::kClone;
  if (name == "design") return bt::Layout::kDesign;
  return bt::Layout::kDirection;
}

// One golden case as the CPU test runs it: greedy, penalty 1.1 on codebook 0, EOS masked.
struct CaseSetup {
  bt::GenerationParams params;
  std::vector<Tensor> rows;  // per branch
  bt::gpu::StreamSetup setup;
};

std::unique_ptr<CaseSetup> case_setup(const Fixture& f, const nlohmann::json& cs) {
  auto c = std::make_unique<CaseSetup>();
  bt::GenerationParams& p = c->params;
  p = bt::default_generation_params(f.files.config);
  p.backbone.greedy = p.depth.greedy = true;
  p.depth.repetition_penalty = 1.0f;
  const std::string mode = cs["mode"];
  p.layout = mode == "dual" ? bt::Layout::kDirection : layout_of(cs["branches"]["cond"]["layout"]);
  if (mode == "cfg") p.guidance = bt::Guidance::kCfg, p.cfg_scale = cs["cfg_scale"].get<float>();
  if (mode == "dual") {
    p.guidance = bt::Guidance::kDual;
    p.ref_scale = cs["dual_cfg_scales"][0].get<float>();
    p.ins_scale = cs["dual_cfg_scales"][1].get<float>();
  }
  p.max_frames = p.min_frames = cs["frames"].get<int64_t>();
  auto layouts = bt::branch_layouts(p.layout, p.guidance);
  EXPECT_TRUE(layouts.ok());
  if (!layouts.ok()) return nullptr;
  for (const bt::Layout l : *layouts) {
    auto pl = bt::build_layout(f.files.config, l, f.parts);
    EXPECT_TRUE(pl.ok());
    if (!pl.ok()) return nullptr;
    auto rows = bt::prompt_rows(f.files.config, *pl, f.parts.ref, f.model.encoder, f.model.audio_table);
    EXPECT_TRUE(rows.ok());
    if (!rows.ok()) return nullptr;
    c->rows.push_back(std::move(*rows));
  }
  bt::gpu::StreamSetup& st = c->setup;
  for (const Tensor& t : c->rows) st.branches.push_back(&t);
  st.guide = p.guidance == bt::Guidance::kNone  ? bt::gpu::Guide{0, 0, 0}
             : p.guidance == bt::Guidance::kCfg ? bt::gpu::Guide{1, p.cfg_scale, 0}
                                                : bt::gpu::Guide{2, p.ref_scale, p.ins_scale};
  st.backbone = p.backbone;
  st.depth = p.depth;
  st.max_frames = p.max_frames;
  st.min_frames = p.min_frames;
  return c;
}

std::unique_ptr<bt::gpu::FrameBatch> start(const Fixture& f, const CaseSetup& c) {
  auto fb = bt::gpu::FrameBatch::create(f.dev, {&c.setup, 1});
  EXPECT_TRUE(fb.ok()) << fb.error().to_string();
  if (!fb.ok()) return nullptr;
  const Status st = (*fb)->prefill({&c.setup, 1});
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  if (!st.ok()) return nullptr;
  return std::move(*fb);
}

TEST(BreezeGpu, GreedyCodesEqualTheGoldens) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  int cases = 0, mismatches = 0, near_ties = 0, compared = 0;
  for (const auto& cs : f->manifest["cases"]) {
    const std::string id = cs["id"];
    SCOPED_TRACE(id);
    bt::test::Golden g("gen_" + id);
    const std::vector<int32_t> want = g.ids("codes");
    const Tensor bm = g.f32("backbone_margin"), dm = g.f32("depth_margin");
    const int64_t F = cs["frames"].get<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(want.size()), F * 16);
    auto c = case_setup(*f, cs);
    ASSERT_NE(c, nullptr);
    auto fb = start(*f, *c);
    ASSERT_NE(fb, nullptr);
    ++cases;
    bool diverged = false;
    for (int64_t t = 0; t < F && !diverged; ++t) {
      const Status st = fb->run_frame(t + 1 < F);
      ASSERT_TRUE(st.ok()) << st.error().to_string();
      ASSERT_EQ(fb->error(0), 0);
      const int32_t* got = fb->frame_codes(0);
      for (int64_t k = 0; k < 16; ++k) {
        ++compared;
        if (got[k] == want[static_cast<size_t>(t * 16 + k)]) continue;
        const float margin = k == 0 ? bm.f32()[t] : dm.f32()[t * 15 + k - 1];
        diverged = true;
        if (margin < kNearTie) {
          ++near_ties;
          std::printf("[ %s ] near-tie divergence at frame %lld codebook %lld (margin %.3g)\n", id.c_str(),
                      static_cast<long long>(t), static_cast<long long>(k), margin);
        } else {
          ++mismatches;
          ADD_FAILURE() << id << ": frame " << t << " codebook " << k << ": " << got[k] << " != golden "
                        << want[static_cast<size_t>(t * 16 + k)] << " (margin " << margin << ")";
        }
        break;
      }
    }
  }
  EXPECT_EQ(cases, 7);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(compared, 7 * 16 * 10);  // many decisions were compared (near ties stop a case early)
  std::printf("[ breeze gpu ] %d cases: %d codes compared, mismatches %d, near-tie divergences %d\n", cases, compared,
              mismatches, near_ties);
}

double max_rel(const float* a, const float* b, size_t n) {
  return rel_err(std::vector<float>(a, a + n), std::vector<float>(b, b + n));
}

// Raw logits of every branch against the CPU stages on the same inputs: the prefill's backbone
// logits, the 15 depth steps of frame 0 (the CPU walk is fed the GPU's codes), and the backbone
// step on frame 0's row.
TEST(BreezeGpu, BackboneAndDepthLogitsMatchTheCpu) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  const bt::Config& cfg = f->files.config;
  const int64_t H = f->model.backbone.hidden(), C = f->model.backbone.classes(), V = f->model.depth.vocab();
  double worst_bb = 0, worst_depth = 0, worst_step = 0;
  int checked = 0;
  for (const auto& cs : f->manifest["cases"]) {
    const std::string id = cs["id"];
    if (id != "plain" && id != "design_cfg3" && id != "direction_dualcfg") continue;
    SCOPED_TRACE(id);
    auto c = case_setup(*f, cs);
    ASSERT_NE(c, nullptr);
    auto fb = start(*f, *c);
    ASSERT_NE(fb, nullptr);
    const int64_t NB = static_cast<int64_t>(c->rows.size());
    ASSERT_EQ(fb->branches(), NB);
    auto gpu_bb = fb->backbone_logits();
    ASSERT_TRUE(gpu_bb.ok());

    std::vector<nn::KvCache> caches, depth_caches;
    std::vector<float> hidden(static_cast<size_t>(NB * H)), logits(static_cast<size_t>(NB * C));
    for (int64_t b = 0; b < NB; ++b) {
      caches.push_back(f->model.backbone.make_cache());
      depth_caches.push_back(f->model.depth.make_cache());
    }
    for (int64_t b = 0; b < NB; ++b) {
      const Tensor& x = c->rows[static_cast<size_t>(b)];
      const int64_t P = x.dim(0);
      std::vector<float> h(static_cast<size_t>(P * H));
      const nn::SequenceRows seq{&caches[static_cast<size_t>(b)], 0, P};
      ASSERT_TRUE(f->model.backbone.forward({&seq, 1}, x.f32(), h.data(), logits.data() + b * C, nullptr).ok());
      std::copy(h.end() - H, h.end(), hidden.begin() + b * H);
    }
    const double e_bb = max_rel(gpu_bb->data(), logits.data(), logits.size());
    EXPECT_LE(e_bb, kLogitRelTol);
    worst_bb = std::max(worst_bb, e_bb);

    ASSERT_TRUE(fb->run_frame(true).ok());
    std::vector<int32_t> codes(fb->frame_codes(0), fb->frame_codes(0) + 16);
    auto gpu_depth = fb->depth_logits();
    ASSERT_TRUE(gpu_depth.ok());
    std::vector<bt::DepthBranch> br;
    for (int64_t b = 0; b < NB; ++b) br.push_back({&depth_caches[static_cast<size_t>(b)], hidden.data() + b * H});
    std::vector<float> cpu_depth(static_cast<size_t>(15 * NB * V));
    std::vector<int32_t> walked(16);
    walked[0] = codes[0];
    const bt::DepthPicker teacher = [&](int64_t k, std::span<const float>) -> Result<int32_t> { return codes[static_cast<size_t>(k)]; };
    ASSERT_TRUE(f->model.depth.walk(br, walked.data(), teacher, nullptr, cpu_depth.data()).ok());
    ASSERT_EQ(gpu_depth->size(), cpu_depth.size());
    const double e_depth = max_rel(gpu_depth->data(), cpu_depth.data(), cpu_depth.size());
    EXPECT_LE(e_depth, kLogitRelTol);
    worst_depth = std::max(worst_depth, e_depth);

    // The next backbone step, fed frame 0's row.
    std::vector<float> row(static_cast<size_t>(H));
    bt::frame_row(cfg, f->model.audio_table, codes.data(), row.data());
    auto gpu_step = fb->backbone_logits();
    ASSERT_TRUE(gpu_step.ok());
    for (int64_t b = 0; b < NB; ++b) {
      nn::KvCache& kc = caches[static_cast<size_t>(b)];
      const nn::SequenceRows seq{&kc, kc.length(), 1};
      ASSERT_TRUE(f->model.backbone.forward({&seq, 1}, row.data(), nullptr, logits.data() + b * C, nullptr).ok());
    }
    const double e_step = max_rel(gpu_step->data(), logits.data(), logits.size());
    EXPECT_LE(e_step, kLogitRelTol);
    worst_step = std::max(worst_step, e_step);
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  std::printf("[ breeze gpu ] max relative logit error vs CPU: backbone prefill %.3g, depth (15 steps) %.3g, "
              "backbone step %.3g\n", worst_bb, worst_depth, worst_step);
}

// The CUDA engine against the CPU engine through TtsModel: seeded sampling (the checkpoint's
// sampler), CFG, EOS allowed; two streams of one device batch against their single CPU runs.
TEST(BreezeGpu, EngineEqualsTheCpuEngine) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  auto cpu = engine::load_tts_model(bt::test::tiny_model_dir());
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  auto gpu = engine::load_cuda_tts_model(bt::test::tiny_model_dir());
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  const auto request = [&](uint64_t seed) {
    engine::SynthesisRequest r;
    r.text_ids = f->parts.text;
    r.instruct_ids = f->parts.instruct;
    r.cfg_scale = 2.5f;
    r.max_frames = 24;
    r.length_cap.frames_per_token = 0;
    r.seed = seed;
    r.activations = engine::ActivationPrecision::kF32;  // the CPU engine's default is bf16; the GPU computes f32
    return r;
  };
  using Frames = std::vector<std::vector<int32_t>>;
  const auto run = [](const engine::TtsModel& m, std::vector<engine::SynthesisRequest> reqs, std::vector<Frames>& frames,
                      std::vector<engine::StopReason>& reasons) {
    std::vector<std::unique_ptr<engine::TtsStream>> owned;
    std::vector<engine::TtsStream*> ss;
    for (const auto& r : reqs) {
      auto s = m.create_stream(r);
      ASSERT_TRUE(s.ok()) << s.error().to_string();
      owned.push_back(std::move(*s));
      ss.push_back(owned.back().get());
    }
    frames.assign(reqs.size(), {});
    std::vector<engine::StepResult> out(ss.size());
    for (int guard = 0; guard < 100 && std::any_of(ss.begin(), ss.end(), [](auto* s) { return !s->finished(); }); ++guard) {
      std::vector<engine::TtsStream*> live;
      std::vector<size_t> idx;
      for (size_t i = 0; i < ss.size(); ++i)
        if (!ss[i]->finished()) live.push_back(ss[i]), idx.push_back(i);
      std::vector<engine::StepResult> o(live.size());
      const Status st = m.step(live, o);
      ASSERT_TRUE(st.ok()) << st.error().to_string();
      for (size_t j = 0; j < live.size(); ++j)
        if (o[j].has_frame) frames[idx[j]].push_back(o[j].codes);
    }
    reasons.clear();
    for (auto* s : ss) reasons.push_back(s->stop_reason());
  };
  int total = 0;
  for (const uint64_t seed : {3u, 4u}) {
    std::vector<Frames> want, got;
    std::vector<engine::StopReason> want_r, got_r;
    run(**cpu, {request(seed)}, want, want_r);
    run(**gpu, {request(seed)}, got, got_r);
    EXPECT_EQ(got, want) << "seed " << seed;
    EXPECT_EQ(got_r, want_r);
    EXPECT_GT(want[0].size(), 0u);
    total += static_cast<int>(want[0].size());
  }
  // A batch of two streams equals each stream's CPU run.
  std::vector<Frames> w3, w4, both;
  std::vector<engine::StopReason> r3, r4, rb;
  run(**cpu, {request(3)}, w3, r3);
  run(**cpu, {request(4)}, w4, r4);
  run(**gpu, {request(3), request(4)}, both, rb);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0], w3[0]);
  EXPECT_EQ(both[1], w4[0]);
  EXPECT_EQ(rb, (std::vector<engine::StopReason>{r3[0], r4[0]}));
  std::printf("[ breeze gpu ] engine: %d sampled CFG frames equal the CPU engine's (single and batched)\n", total);
}

}  // namespace
}  // namespace chorus::gpu_test
