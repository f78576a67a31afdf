// The Breeze TTS 2 device frame loop (models/breeze_tts/frame_batch_cuda.h) against the goldens of
// shared/reference/breeze_tts2 and the CPU backend: greedy codes of every gen_* case, the raw backbone
// and depth logits of every guidance branch, and the CUDA engine against the CPU engine; then the
// same in bf16-activation mode against the CPU's bf16 mode (BreezeGpuBf16.*, no bf16 goldens exist).
//
// Near ties: a greedy decision may differ from the golden only where the golden's recorded margin
// (backbone_margin / depth_margin) is below kNearTie; such a divergence is reported and the case
// stops being compared there (later frames follow another history).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "breeze/breeze_test_util.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
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

std::unique_ptr<CaseSetup> case_setup(const Fixture& f, const nlohmann::json& cs,
                                      bt::Activations act = bt::Activations::kF32) {
  auto c = std::make_unique<CaseSetup>();
  bt::GenerationParams& p = c->params;
  p = bt::default_generation_params(f.files.config);
  p.act = act;
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
    const bt::TextEncoder& encoder = act == bt::Activations::kBF16 ? f.model.encoder_bf16 : f.model.encoder;
    auto rows = bt::prompt_rows(f.files.config, *pl, f.parts.ref, encoder, f.model.audio_table, nullptr, act);
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
  st.act = act;
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

// How a test drives the frame loop: each frame waited for before the next is launched (one graph
// per frame), the next frame launched ahead of the wait, and the same with each frame's halves as
// two graphs (the engine's default is the second).
enum class Drive { kOneByOne, kAhead, kSplitAhead };
constexpr Drive kDrives[] = {Drive::kOneByOne, Drive::kAhead, Drive::kSplitAhead};
const char* drive_name(Drive d) {
  return d == Drive::kOneByOne ? "one by one" : d == Drive::kAhead ? "launched ahead" : "split graphs, launched ahead";
}
// Frame t of F as `d` runs it.
Status run_frame(bt::gpu::FrameBatch& fb, Drive d, int64_t t, int64_t F) {
  const bool feed = t + 1 < F;
  return fb.run_frame(feed, d != Drive::kOneByOne && feed ? std::optional<bool>(t + 2 < F) : std::nullopt);
}

TEST(BreezeGpu, GreedyCodesEqualTheGoldens) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  int cases = 0, mismatches = 0, near_ties = 0, compared = 0;
  for (const Drive d : kDrives)
  for (const auto& cs : f->manifest["cases"]) {
    const std::string id = cs["id"];
    SCOPED_TRACE(id + ", " + drive_name(d));
    bt::test::Golden g("gen_" + id);
    const std::vector<int32_t> want = g.ids("codes");
    const Tensor bm = g.f32("backbone_margin"), dm = g.f32("depth_margin");
    const int64_t F = cs["frames"].get<int64_t>();
    ASSERT_EQ(static_cast<int64_t>(want.size()), F * 16);
    auto c = case_setup(*f, cs);
    ASSERT_NE(c, nullptr);
    auto fb = start(*f, *c);
    ASSERT_NE(fb, nullptr);
    fb->set_split_frames(d == Drive::kSplitAhead);
    ++cases;
    bool diverged = false;
    for (int64_t t = 0; t < F && !diverged; ++t) {
      const Status st = run_frame(*fb, d, t, F);
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
          std::printf("[ %s, %s ] near-tie divergence at frame %lld codebook %lld (margin %.3g)\n", id.c_str(),
                      drive_name(d), static_cast<long long>(t), static_cast<long long>(k), margin);
        } else {
          ++mismatches;
          ADD_FAILURE() << id << ": frame " << t << " codebook " << k << ": " << got[k] << " != golden "
                        << want[static_cast<size_t>(t * 16 + k)] << " (margin " << margin << ")";
        }
        break;
      }
    }
  }
  EXPECT_EQ(cases, 7 * 3);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(compared, 3 * 7 * 16 * 10);  // many decisions were compared (near ties stop a case early)
  std::printf("[ breeze gpu ] %d cases (7 goldens, 3 ways of driving the frames): %d codes compared, mismatches %d, "
              "near-tie divergences %d\n", cases, compared, mismatches, near_ties);
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
  auto gpu = engine::load_tts_model(bt::test::tiny_model_dir(), {.device = engine::Device::cuda(0)});
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  const auto request = [&](uint64_t seed) {
    engine::SynthesisRequest r;
    r.text_ids = f->parts.text;
    r.instruct_ids = f->parts.instruct;
    r.cfg_scale = 2.5f;
    r.max_frames = 24;
    r.length_cap.frames_per_token = 0;
    r.seed = seed;
    r.activations = engine::ActivationPrecision::kF32;  // the exactness mode (bf16: BreezeGpuBf16.*)
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
  // A dual-CFG and a plain stream share a pool (a slot per branch: 4 rows, the first depth step 8,
  // so every product stays f32-accurate) and equal their CPU runs.
  engine::SynthesisRequest dual = request(5), plain = request(6);
  dual.cfg_scale.reset();
  dual.dual_cfg = std::make_pair(1.5f, 2.0f);
  dual.ref_codes = bt::test::code_frames(f->parts.ref.codes);
  dual.ref_text_ids = f->parts.ref_text;
  plain.cfg_scale.reset();
  std::vector<Frames> wd, wp, mixed;
  std::vector<engine::StopReason> rd, rp, rm;
  run(**cpu, {dual}, wd, rd);
  run(**cpu, {plain}, wp, rp);
  run(**gpu, {dual, plain}, mixed, rm);
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[0], wd[0]);
  EXPECT_EQ(mixed[1], wp[0]);
  EXPECT_EQ(rm, (std::vector<engine::StopReason>{rd[0], rp[0]}));
  EXPECT_GT(wd[0].size(), 0u);
  EXPECT_NE(wd[0], wp[0]);
  total += static_cast<int>(wd[0].size() + wp[0].size());
  std::printf("[ breeze gpu ] engine: %d sampled frames (CFG, dual CFG, plain) equal the CPU engine's (single and "
              "batched)\n", total);
}

// ---- bf16 activations (Activations::kBF16: nn::Rounding::kBF16 on the CPU, the bf16 flag of the
// device kernels) --------------------------------------------------------------------------------
//
// Both sides round to bf16 at the same points, so most intermediates are bit-identical; what differs
// is only the f32 summation order inside an op (and cuBLAS's accumulation in prefill), an error of a
// few 2^-24 relative. That flips a bf16 rounding (one ulp, 2^-8 relative) only when a value lies
// within ~2^-16 of a rounding midpoint: rare, but a flipped intermediate perturbs the next op's
// outputs by ulp/sqrt(K) each, which can flip more of them, so a flip cascades into differences of
// the order of bf16 noise itself. Hence two criteria:
// - every logit vector within kBf16LogitTol of the CPU's (relative to its largest logit): the bf16
//   noise floor; bf16 vs f32 on this model is 4.6e-3 (backbone) / 9.6e-3 (depth) on the CPU
//   (docs/breeze.md), so 2^-5 is three times the larger; wrong heads, positions or stages give O(1);
// - most depth-step logit vectors "tight" (≤ kTightTol: the hidden states were bit-identical and only
//   the f32 heads' summation order differs, ~1e-6). The depth walks are fed the GPU's own backbone
//   hidden state, so a cascade in the longer backbone prefill does not spill into them. A missing or
//   misplaced rounding point on the GPU changes nearly every value by up to half an ulp, so no
//   vector stays tight; neither does the f32 GPU path.
constexpr double kBf16LogitTol = 1.0 / 32;
constexpr double kTightTol = 1e-4;
constexpr double kMinTightShare = 0.5;

double frac_equal(const float* a, const float* b, size_t n) {
  size_t eq = 0;
  for (size_t i = 0; i < n; ++i) eq += a[i] == b[i];
  return n ? static_cast<double>(eq) / static_cast<double>(n) : 0.0;
}

TEST(BreezeGpuBf16, LogitsMatchTheCpuBf16) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  const bt::Config& cfg = f->files.config;
  const auto B16 = bt::Activations::kBF16;
  const int64_t H = f->model.backbone.hidden(), C = f->model.backbone.classes(), V = f->model.depth.vocab();
  double worst_bb = 0, worst_depth = 0, worst_step = 0, hidden_eq = 0;
  int depth_vectors = 0, depth_tight = 0, step_tight = 0, step_vectors = 0, checked = 0, branches = 0;
  for (const auto& cs : f->manifest["cases"]) {
    const std::string id = cs["id"];
    if (id != "plain" && id != "design_cfg3" && id != "direction_dualcfg") continue;
    SCOPED_TRACE(id);
    auto c = case_setup(*f, cs, B16);
    ASSERT_NE(c, nullptr);
    auto fb = start(*f, *c);
    ASSERT_NE(fb, nullptr);
    const int64_t NB = static_cast<int64_t>(c->rows.size());
    auto gpu_bb = fb->backbone_logits();
    auto gpu_h = fb->backbone_hidden();
    ASSERT_TRUE(gpu_bb.ok() && gpu_h.ok());

    std::vector<nn::KvCache> caches, depth_caches;
    std::vector<float> hidden(static_cast<size_t>(NB * H)), logits(static_cast<size_t>(NB * C));
    for (int64_t b = 0; b < NB; ++b) {
      caches.push_back(f->model.backbone.make_cache());
      depth_caches.push_back(f->model.depth.make_cache());
      const Tensor& x = c->rows[static_cast<size_t>(b)];
      const int64_t P = x.dim(0);
      std::vector<float> h(static_cast<size_t>(P * H));
      const nn::SequenceRows seq{&caches[static_cast<size_t>(b)], 0, P};
      ASSERT_TRUE(f->model.backbone.forward({&seq, 1}, x.f32(), h.data(), logits.data() + b * C, nullptr, B16).ok());
      std::copy(h.end() - H, h.end(), hidden.begin() + b * H);
    }
    hidden_eq += frac_equal(gpu_h->data(), hidden.data(), hidden.size()) * static_cast<double>(NB);
    branches += static_cast<int>(NB);
    const double e_bb = max_rel(gpu_bb->data(), logits.data(), logits.size());
    EXPECT_LE(e_bb, kBf16LogitTol);
    worst_bb = std::max(worst_bb, e_bb);

    ASSERT_TRUE(fb->run_frame(true).ok());
    std::vector<int32_t> codes(fb->frame_codes(0), fb->frame_codes(0) + 16);
    auto gpu_depth = fb->depth_logits();
    ASSERT_TRUE(gpu_depth.ok());
    std::vector<bt::DepthBranch> br;  // fed the GPU's backbone state (see above)
    for (int64_t b = 0; b < NB; ++b) br.push_back({&depth_caches[static_cast<size_t>(b)], gpu_h->data() + b * H});
    std::vector<float> cpu_depth(static_cast<size_t>(15 * NB * V));
    std::vector<int32_t> walked(16);
    walked[0] = codes[0];
    const bt::DepthPicker teacher = [&](int64_t k, std::span<const float>) -> Result<int32_t> { return codes[static_cast<size_t>(k)]; };
    ASSERT_TRUE(f->model.depth.walk(br, walked.data(), teacher, nullptr, cpu_depth.data(), B16).ok());
    ASSERT_EQ(gpu_depth->size(), cpu_depth.size());
    for (int64_t v = 0; v < 15 * NB; ++v) {  // one (step, branch) vector at a time
      const double e = max_rel(gpu_depth->data() + v * V, cpu_depth.data() + v * V, static_cast<size_t>(V));
      EXPECT_LE(e, kBf16LogitTol) << "depth step " << v / NB + 1 << " branch " << v % NB;
      depth_tight += e <= kTightTol;
      ++depth_vectors;
      worst_depth = std::max(worst_depth, e);
    }

    // The next backbone step on frame 0's row (the CPU continues from its own prefill caches).
    std::vector<float> row(static_cast<size_t>(H));
    bt::frame_row(cfg, f->model.audio_table, codes.data(), row.data(), B16);
    auto gpu_step = fb->backbone_logits();
    ASSERT_TRUE(gpu_step.ok());
    for (int64_t b = 0; b < NB; ++b) {
      nn::KvCache& kc = caches[static_cast<size_t>(b)];
      const nn::SequenceRows seq{&kc, kc.length(), 1};
      ASSERT_TRUE(f->model.backbone.forward({&seq, 1}, row.data(), nullptr, logits.data() + b * C, nullptr, B16).ok());
      const double e = max_rel(gpu_step->data() + b * C, logits.data() + b * C, static_cast<size_t>(C));
      EXPECT_LE(e, kBf16LogitTol);
      step_tight += e <= kTightTol;
      ++step_vectors;
      worst_step = std::max(worst_step, e);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  ASSERT_EQ(depth_vectors, 15 * 6);
  EXPECT_GE(depth_tight, kMinTightShare * depth_vectors) << "too few depth steps agree to f32 precision";
  std::printf("[ breeze gpu bf16 ] max relative logit error vs CPU bf16: backbone prefill %.3g, depth %.3g, "
              "backbone step %.3g; depth vectors within %.0e: %d/%d, backbone steps: %d/%d; prefill hidden "
              "bit-equal %.1f%%\n", worst_bb, worst_depth, worst_step, kTightTol, depth_tight, depth_vectors,
              step_tight, step_vectors, 100.0 * hidden_eq / std::max(1, branches));
}

// The guided, penalised logit of `id` minus that of `other` for one decision, from the branch logits.
double decision_gap(const bt::GenerationParams& p, const float* branch_logits, int64_t n, int32_t id, int32_t other,
                    const std::vector<int32_t>& history, double* scale) {
  const auto guided = [&](int32_t i) {
    const float* b = branch_logits;
    double l = b[i];
    if (p.guidance == bt::Guidance::kCfg) l = b[n + i] + p.cfg_scale * (b[i] - b[n + i]);
    if (p.guidance == bt::Guidance::kDual) l = b[i] + p.ref_scale * (b[n + i] - b[i]) + p.ins_scale * (b[2 * n + i] - b[i]);
    if (std::find(history.begin(), history.end(), i) != history.end())
      l = l > 0 ? l / p.backbone.repetition_penalty : l * p.backbone.repetition_penalty;
    return l;
  };
  const int nb = p.guidance == bt::Guidance::kNone ? 1 : p.guidance == bt::Guidance::kCfg ? 2 : 3;
  double mx = 0;
  for (int64_t i = 0; i < nb * n; ++i) mx = std::max(mx, std::fabs(static_cast<double>(branch_logits[i])));
  // A guided logit's error is at most (1 + 2·Σ|s|) times the branches' largest error.
  const double amp = 1.0 + 2.0 * (p.guidance == bt::Guidance::kCfg    ? std::fabs(p.cfg_scale)
                                  : p.guidance == bt::Guidance::kDual ? std::fabs(p.ref_scale) + std::fabs(p.ins_scale)
                                                                      : 0.0);
  *scale = mx * amp;
  return guided(id) - guided(other);
}

// Greedy codes of every gen_* case, bf16 on the GPU vs the CPU generation in bf16. A divergence is a
// near tie when the two ids' guided logits (the GPU's) are closer than twice the logit tolerance
// above (each side may be off by it); the case stops there.
TEST(BreezeGpuBf16, GreedyCodesEqualTheCpuBf16) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  const int64_t C = f->model.backbone.classes(), V = f->model.depth.vocab();
  int cases = 0, compared = 0, near_ties = 0, mismatches = 0, full = 0;
  for (const auto& cs : f->manifest["cases"]) {
    const std::string id = cs["id"];
    SCOPED_TRACE(id);
    const int64_t F = cs["frames"].get<int64_t>();
    auto c = case_setup(*f, cs, bt::Activations::kBF16);
    ASSERT_NE(c, nullptr);
    auto gen = bt::BreezeGeneration::start(f->model, f->parts, c->params);
    ASSERT_TRUE(gen.ok()) << gen.error().to_string();
    std::vector<int32_t> want;
    std::vector<int32_t> frame(16);
    for (int64_t t = 0; t < F; ++t) {
      auto more = gen->step(frame, &ThreadPool::global());
      ASSERT_TRUE(more.ok() && *more) << "CPU stopped at frame " << t;
      want.insert(want.end(), frame.begin(), frame.end());
    }
    auto fb = start(*f, *c);
    ASSERT_NE(fb, nullptr);
    ++cases;
    std::vector<int32_t> history;  // codebook-0 ids of earlier frames (the penalty's)
    bool diverged = false;
    for (int64_t t = 0; t < F && !diverged; ++t) {
      auto c0_logits = fb->backbone_logits();  // the logits codebook 0 of frame t was sampled from
      ASSERT_TRUE(c0_logits.ok());
      ASSERT_TRUE(fb->run_frame(t + 1 < F).ok());
      ASSERT_EQ(fb->error(0), 0);
      const int32_t* got = fb->frame_codes(0);
      for (int64_t k = 0; k < 16; ++k) {
        ++compared;
        const int32_t w = want[static_cast<size_t>(t * 16 + k)];
        if (got[k] == w) continue;
        diverged = true;
        double scale = 0, gap = 0;
        if (k == 0) {
          gap = decision_gap(c->params, c0_logits->data(), C, got[k], w, history, &scale);
        } else {
          auto d = fb->depth_logits();
          ASSERT_TRUE(d.ok());
          const int64_t nb = static_cast<int64_t>(c->rows.size());
          gap = decision_gap(c->params, d->data() + (k - 1) * nb * V, V, got[k], w, {}, &scale);
        }
        const double tol = 2.0 * kBf16LogitTol * scale;
        std::printf("[ %s ] bf16 divergence at frame %lld codebook %lld: gpu %d cpu %d, guided gap %.3g (near-tie "
                    "bound %.3g)\n", id.c_str(), static_cast<long long>(t), static_cast<long long>(k), got[k], w, gap, tol);
        if (std::fabs(gap) <= tol) ++near_ties;
        else ++mismatches, ADD_FAILURE() << id << ": frame " << t << " codebook " << k << " differs, gap " << gap;
        break;
      }
      history.push_back(got[0]);
    }
    full += !diverged;
  }
  EXPECT_EQ(cases, 7);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(compared, 7 * 16 * 3);  // not vacuous: several frames per case on average
  std::printf("[ breeze gpu bf16 ] %d cases (%d equal to the end): %d codes compared, mismatches %d, near-tie "
              "divergences %d\n", cases, full, compared, mismatches, near_ties);
}

// The bf16 mode really rounds: on the GPU its logits differ from the f32 mode's by far more than the
// f32 path's own error vs the CPU (measured ~3.5e-6); on the CPU bf16 vs f32 is 4.6e-3.
TEST(BreezeGpuBf16, DiffersFromF32) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  const nlohmann::json* plain = nullptr;
  for (const auto& cs : f->manifest["cases"])
    if (cs["id"] == "plain") plain = &cs;
  ASSERT_NE(plain, nullptr);
  std::vector<float> logits[2], hidden[2];
  int i = 0;
  for (const auto act : {bt::Activations::kF32, bt::Activations::kBF16}) {
    auto c = case_setup(*f, *plain, act);
    ASSERT_NE(c, nullptr);
    auto fb = start(*f, *c);
    ASSERT_NE(fb, nullptr);
    auto l = fb->backbone_logits();
    auto h = fb->backbone_hidden();
    ASSERT_TRUE(l.ok() && h.ok());
    logits[i] = *l;
    hidden[i++] = *h;
  }
  const double d = rel_err(logits[1], logits[0]);
  const double eq = frac_equal(hidden[0].data(), hidden[1].data(), hidden[0].size());
  size_t bf16_valued = 0;  // elements of the bf16 run's hidden state that are bf16 values
  for (const float v : hidden[1]) bf16_valued += round_to_bf16(v) == v;
  EXPECT_GT(d, 5e-4);
  EXPECT_LT(eq, 0.5);
  EXPECT_EQ(bf16_valued, hidden[1].size());  // the final norm's output is stored as bf16
  std::printf("[ breeze gpu bf16 ] bf16 vs f32 on the GPU: prefill logits differ by %.3g relative, %.1f%% of the "
              "hidden state equal\n", d, 100.0 * eq);
}

// The CUDA engine honours SynthesisRequest::activations: the model default is bf16 (the same frames
// as an explicit bf16 request), and sampled bf16 frames follow the CPU engine's bf16 frames (until a
// near tie; the count of equal leading frames is printed).
TEST(BreezeGpuBf16, EngineDefaultsToBf16) {
  REQUIRE_GPU();
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  auto cpu = engine::load_tts_model(bt::test::tiny_model_dir());
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  auto gpu = engine::load_tts_model(bt::test::tiny_model_dir(), {.device = engine::Device::cuda(0)});
  ASSERT_TRUE(gpu.ok()) << gpu.error().to_string();
  using Frames = std::vector<std::vector<int32_t>>;
  const auto run = [&](const engine::TtsModel& m, engine::ActivationPrecision act) {
    engine::SynthesisRequest r;
    r.text_ids = f->parts.text;
    r.instruct_ids = f->parts.instruct;
    r.cfg_scale = 2.5f;
    r.max_frames = 16;
    r.length_cap.frames_per_token = 0;
    r.seed = 5;
    r.activations = act;
    Frames frames;
    auto s = m.create_stream(r);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
    if (!s.ok()) return frames;
    engine::TtsStream* one = s->get();
    for (int guard = 0; guard < 40 && !one->finished(); ++guard) {
      engine::StepResult o;
      const Status st = m.step({&one, 1}, {&o, 1});
      EXPECT_TRUE(st.ok()) << st.error().to_string();
      if (!st.ok()) break;
      if (o.has_frame) frames.push_back(o.codes);
    }
    return frames;
  };
  const Frames def = run(**gpu, engine::ActivationPrecision::kModelDefault);
  const Frames b16 = run(**gpu, engine::ActivationPrecision::kBF16);
  const Frames f32 = run(**gpu, engine::ActivationPrecision::kF32);
  const Frames cpu16 = run(**cpu, engine::ActivationPrecision::kBF16);
  ASSERT_FALSE(def.empty());
  EXPECT_EQ(def, b16);
  EXPECT_NE(f32, b16) << "the f32 request ran in bf16 (or the other way round)";
  // Not compared for equality with the CPU engine: the engine's prompt rows come from the GPU text
  // encoder, whose bf16 outputs differ from the CPU's by single rounding steps (about 30 % of
  // values on this model), and seeded sampling on a tiny random model then picks other ids. The
  // frame loop's bf16 agreement with the CPU is checked above on identical prompt rows.
  size_t same = 0;
  while (same < b16.size() && same < cpu16.size() && b16[same] == cpu16[same]) ++same;
  std::printf("[ breeze gpu bf16 ] engine: default = bf16 (%zu frames); %zu leading frames equal the CPU bf16 "
              "engine's (of %zu); f32 frames %s\n", def.size(), same, cpu16.size(), f32 == b16 ? "equal" : "differ");
}

}  // namespace
}  // namespace chorus::gpu_test
