// The backbone over the golden prompts and the golden frames: prefill hidden states and logits of
// every layout, then every generation case's 30 steps (frame rows fed back at the next position,
// one KV cache per CFG branch, branches batched in one call), the CFG / dual-CFG combinations and
// the greedy codebook-0 choice through the shared sampler (penalty 1.1 on generated ids, EOS
// blocked as the harness did, reserved ids masked).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/backbone.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/prompt.h"
#include "models/breeze_tts/weights.h"
#include "runtime/cpu/kernels.h"
#include "sampling/sampler.h"

namespace chorus::breeze_tts {
namespace {

constexpr double kHiddenTol = 5e-5, kLogitTol = 2e-4;

struct Fixture {
  ModelFiles files;
  TextEncoder encoder;
  Backbone backbone;
  nlohmann::json manifest;
  std::map<std::string, Tensor> prompt_rows;  // layout name -> prefill rows
  std::map<std::string, std::vector<int32_t>> prompt_ids;
};

Layout layout_of(const std::string& name) {
  if (name == "plain") return Layout::kPlain;
  if (name == "clone") return Layout::kClone;
  if (name == "design") return Layout::kDesign;
  return Layout::kDirection;
}

const Fixture& fixture() {
  static const Fixture* f = [] {
    auto files = open_model_files(test::tiny_model_dir());
    if (!files.ok()) throw std::runtime_error(files.error().to_string());
    auto enc = TextEncoder::create(files->config, files->main);
    auto bb = Backbone::load(files->config, files->main);
    if (!enc.ok() || !bb.ok()) throw std::runtime_error("tiny_breeze stages failed to load");
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    auto* fx = new Fixture{std::move(*files), std::move(*enc), std::move(*bb), nlohmann::json::parse(in), {}, {}};
    const auto& ids = fx->manifest["prompt_token_ids"];
    PromptParts p;
    p.text = ids["TEXT"].get<std::vector<int32_t>>();
    p.instruct = ids["INSTR"].get<std::vector<int32_t>>();
    p.ref_text = ids["REF_TEXT"].get<std::vector<int32_t>>();
    p.ref.codes = test::Golden("prefill_clone").ids("input_values");
    p.ref.frames = static_cast<int64_t>(p.ref.codes.size()) / 16;
    const Tensor table = fx->files.main.tensor(kAudioTable);
    for (const char* name : {"plain", "clone", "design", "direction"}) {
      auto l = build_layout(fx->files.config, layout_of(name), p);
      if (!l.ok()) throw std::runtime_error(l.error().to_string());
      auto rows = prompt_rows(fx->files.config, *l, p.ref, fx->encoder, table);
      if (!rows.ok()) throw std::runtime_error(rows.error().to_string());
      fx->prompt_rows[name] = std::move(*rows);
      fx->prompt_ids[name] = l->input_ids;
    }
    return fx;
  }();
  return *f;
}

TEST(BreezeBackbone, PrefillOfEveryLayoutMatches) {
  const auto& f = fixture();
  double worst_h = 0, worst_l = 0;
  for (const char* name : {"plain", "clone", "design", "direction"}) {
    SCOPED_TRACE(name);
    test::Golden g(std::string("prefill_") + name);
    const Tensor& x = f.prompt_rows.at(name);
    const int64_t P = x.dim(0);
    nn::KvCache cache = f.backbone.make_cache();
    const nn::SequenceRows seq{&cache, 0, P};
    Tensor hidden = Tensor::zeros(DType::kF32, {P, 64});
    std::vector<float> last_logits(2052);
    ASSERT_TRUE(f.backbone.forward({&seq, 1}, x.f32(), hidden.f32(), last_logits.data(), nullptr).ok());
    const double eh = test::max_abs_diff(hidden, g.f32("backbone_last_hidden_state"));
    // Every row's logits, through the same head.
    Tensor logits = Tensor::zeros(DType::kF32, {P, 2052});
    cpu::linear(hidden.f32(), P, cpu::MatrixRef::of(f.files.main.tensor(kLmHead)), nullptr, logits.f32());
    const Tensor want = g.f32("logits");
    const double el = test::max_abs_diff(logits, want);
    EXPECT_LE(test::max_abs_diff(last_logits.data(), want.f32() + (P - 1) * 2052, 2052), kLogitTol);
    EXPECT_LE(eh, kHiddenTol);
    EXPECT_LE(el, kLogitTol);
    worst_h = std::max(worst_h, eh);
    worst_l = std::max(worst_l, el);
  }
  std::printf("[ prefill ] max |diff|: hidden %.3g, logits %.3g\n", worst_h, worst_l);
}

// The guided combination, in the order the upstream mixin writes it.
void combine(const std::string& mode, double s, double s_ref, double s_ins, const std::vector<const float*>& b,
             float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (mode == "none") out[i] = b[0][i];
    else if (mode == "cfg") out[i] = b[1][i] + static_cast<float>(s) * (b[0][i] - b[1][i]);  // cond, uncond
    else out[i] = b[0][i] + static_cast<float>(s_ref) * (b[1][i] - b[0][i]) + static_cast<float>(s_ins) * (b[2][i] - b[0][i]);
  }
}

TEST(BreezeBackbone, EveryGenerationCaseStepByStep) {
  const auto& f = fixture();
  const Tensor table = f.files.main.tensor(kAudioTable);
  const Config& c = f.files.config;
  for (const auto& cs : f.manifest["cases"]) {
    const std::string id = cs["id"], mode = cs["mode"];
    SCOPED_TRACE(id);
    test::Golden g("gen_" + id);
    // Branch order: cond[, uncond] for none/cfg; uncond, ref, ins for dual.
    std::vector<std::string> names;
    if (mode == "dual") names = {"uncond", "ref", "ins"};
    else if (mode == "cfg") names = {"cond", "uncond"};
    else names = {"cond"};
    const double s = mode == "cfg" ? cs["cfg_scale"].get<double>() : 1.0;
    const double s_ref = mode == "dual" ? cs["dual_cfg_scales"][0].get<double>() : 0.0;
    const double s_ins = mode == "dual" ? cs["dual_cfg_scales"][1].get<double>() : 0.0;
    const size_t B = names.size();
    std::vector<nn::KvCache> caches;
    std::vector<nn::SequenceRows> seqs;
    std::vector<float> x;
    for (const auto& b : names) {
      const std::string layout = cs["branches"][b]["layout"];
      EXPECT_EQ(f.prompt_ids.at(layout), g.ids(b + "_prompt_ids")) << b;
      const Tensor& rows = f.prompt_rows.at(layout);
      x.insert(x.end(), rows.f32(), rows.f32() + rows.numel());
      caches.push_back(f.backbone.make_cache());
    }
    for (size_t i = 0; i < B; ++i)
      seqs.push_back({&caches[i], 0, f.prompt_rows.at(cs["branches"][names[i]]["layout"].get<std::string>()).dim(0)});
    const std::vector<int32_t> codes = g.ids("codes");
    const int64_t F = static_cast<int64_t>(codes.size()) / 16;
    ASSERT_EQ(F, 30);
    const Tensor gold_logits = g.f32("backbone_logits");
    std::vector<Tensor> gold_hidden;
    for (const auto& b : names) gold_hidden.push_back(g.f32(b + "_hidden"));
    double worst_h = 0, worst_l = 0;
    int mismatches = 0;
    std::vector<int32_t> history;
    std::vector<float> logits(B * 2052), combined(2052);
    for (int64_t t = 0; t < F; ++t) {
      int64_t total = 0;
      for (const auto& sq : seqs) total += sq.rows;
      std::vector<float> hidden(static_cast<size_t>(total * 64));
      ASSERT_TRUE(f.backbone.forward(seqs, x.data(), hidden.data(), logits.data(), &ThreadPool::global()).ok());
      int64_t end = 0;
      std::vector<const float*> branch;
      for (size_t i = 0; i < B; ++i) {
        end += seqs[i].rows;
        worst_h = std::max(worst_h, test::max_abs_diff(hidden.data() + (end - 1) * 64, gold_hidden[i].f32() + t * 64, 64));
        branch.push_back(logits.data() + i * 2052);
      }
      combine(mode, s, s_ref, s_ins, branch, combined.data(), 2052);
      worst_l = std::max(worst_l, test::max_abs_diff(combined.data(), gold_logits.f32() + t * 2052, 2052));
      // Greedy codebook 0 through the shared sampler, as the harness chose it.
      const int32_t eos = static_cast<int32_t>(c.backbone_eos());
      sampling::LogitRules rules;
      rules.penalized = history;
      rules.allowed_below = c.codec_codebook_size;
      rules.also_allowed = {&eos, 1};
      rules.blocked = {&eos, 1};
      sampling::SamplerParams greedy;
      greedy.greedy = true;
      greedy.repetition_penalty = static_cast<float>(c.generation.repetition_penalty);  // 1.1
      auto pick = sampling::sample(combined, rules, greedy, {});
      ASSERT_TRUE(pick.ok());
      mismatches += *pick != codes[static_cast<size_t>(t * 16)];
      history.push_back(codes[static_cast<size_t>(t * 16)]);
      // Feed the golden frame to every branch at its next position.
      x.assign(B * 64, 0.0f);
      for (size_t i = 0; i < B; ++i) {
        frame_row(c, table, codes.data() + t * 16, x.data() + i * 64);
        seqs[i] = {&caches[i], caches[i].length(), 1};
      }
    }
    EXPECT_LE(worst_h, kHiddenTol);
    EXPECT_LE(worst_l, kLogitTol * (1 + 2 * s + s_ref + s_ins));
    EXPECT_EQ(mismatches, 0);
    std::printf("[ %-18s ] %zu branch(es), 30 steps: max |diff| hidden %.3g, guided logits %.3g, codebook-0 "
                "mismatches %d\n", id.c_str(), B, worst_h, worst_l, mismatches);
  }
}

}  // namespace
}  // namespace chorus::breeze_tts
