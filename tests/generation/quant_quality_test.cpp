// What int8 / int4 weights cost the tiny Qwen3-TTS models, teacher-forced on the official goldens'
// codes (every case): the quantised model's logits against the bf16 model's (relative error, KL of
// codebook 0, top-1 agreement of every codebook, each layer's output) and against the official
// logits recorded in the goldens. Bounds are about twice the worst case measured over the nine
// cases; the planted quantiser mistakes (a group's scale taken from the next group, scales 11 %
// too large) must break them, which shows the bounds can fail.
//
// The tiny models are far from the real ones: widths of 24–64 leave partial groups, and random
// weights give flat distributions with many near ties, so their top-1 agreement is lower than the
// real-size figures in docs/quantization.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "golden_cases.h"
#include "models/qwen3_tts/teacher_forcing.h"
#include "runtime/cpu/quant.h"

namespace chorus::test {
namespace {

using cpu::WeightFormat;
using qwen3_tts::ForcedComparison;

constexpr int64_t kFrames = 40;

struct Bounds {
  double c0_logit, cp_logit, c0_kl_mean, c0_top1, cp_top1, layer;
};
Bounds bounds_for(WeightFormat f) {
  if (f == WeightFormat::kInt8) return {0.006, 0.02, 1e-5, 0.95, 0.93, 0.025};
  return {0.09, 0.25, 2e-3, 0.75, 0.60, 0.30};
}

// Empty when every measure is within the bounds; otherwise what is not.
std::string violations(const ForcedComparison& c, const Bounds& b) {
  std::ostringstream s;
  if (!(c.c0_logit_error <= b.c0_logit)) s << " codebook-0 logit error " << c.c0_logit_error;
  if (!(c.cp_logit_error <= b.cp_logit)) s << " code-predictor logit error " << c.cp_logit_error;
  if (!(c.c0_kl_mean <= b.c0_kl_mean)) s << " KL " << c.c0_kl_mean;
  if (!(c.c0_top1 >= b.c0_top1)) s << " codebook-0 top-1 " << c.c0_top1;
  if (!(c.cp_top1_mean >= b.cp_top1)) s << " code-predictor top-1 " << c.cp_top1_mean;
  for (double e : c.talker_layer_error)
    if (!(e <= b.layer)) s << " talker layer error " << e;
  for (double e : c.cp_layer_error)
    if (!(e <= b.layer)) s << " code-predictor layer error " << e;
  return s.str();
}

std::shared_ptr<const qwen3_tts::Model> quantised(const qwen3_tts::Model& m, WeightFormat f) {
  auto q = qwen3_tts::Model::from_files(m.files(), nullptr, f);
  EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().to_string());
  return q.ok() ? *q : nullptr;
}

struct CaseRun {
  qwen3_tts::ForcedPass ref;
  qwen3_tts::Prompt prompt;
  std::vector<int32_t> codes;
};

CaseRun reference(const GenCase& c) {
  CaseRun r;
  auto m = tiny_model(c.model_dir);
  auto p = qwen3_tts::build_prompt(*m, c.inputs);
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return r;
  r.prompt = *p;
  r.codes = c.golden.i32("codes");
  auto pass = qwen3_tts::teacher_forced_pass(*m, r.prompt, r.codes, kFrames, true);
  EXPECT_TRUE(pass.ok());
  if (pass.ok()) r.ref = std::move(*pass);
  return r;
}

Result<ForcedComparison> measure(const GenCase& c, const CaseRun& r, WeightFormat f, qwen3_tts::ForcedPass* keep = nullptr) {
  auto m = tiny_model(c.model_dir);
  auto q = quantised(*m, f);
  if (!q) return make_error(ErrorCode::kInternal, "no quantised model");
  CHORUS_ASSIGN(qwen3_tts::ForcedPass pass, qwen3_tts::teacher_forced_pass(*q, r.prompt, r.codes, kFrames, true));
  auto cmp = qwen3_tts::compare_forced(m->config(), r.ref, pass);
  if (keep) *keep = std::move(pass);
  return cmp;
}

double rel_error(const float* got, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(QuantQuality, EveryGoldenCaseStaysWithinTheBounds) {
  ASSERT_EQ(gen_cases().size(), 9u);
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    double worst_c0 = 0, worst_cp = 0, worst_kl = 0, min_top1 = 1, min_cp_top1 = 1, worst_official = 0, worst_layer = 0;
    for (const auto& c : gen_cases()) {
      SCOPED_TRACE(c->id + " " + cpu::weight_format_name(f));
      const CaseRun r = reference(*c);
      qwen3_tts::ForcedPass pass;
      auto cmp = measure(*c, r, f, &pass);
      ASSERT_TRUE(cmp.ok()) << cmp.error().to_string();
      EXPECT_EQ(violations(*cmp, bounds_for(f)), "");
      // Quantisation happened: the logits moved, and deeper layers carry more of the error.
      EXPECT_GT(cmp->c0_logit_error, 1e-5);
      ASSERT_FALSE(cmp->talker_layer_error.empty());
      EXPECT_GT(cmp->talker_layer_error.back(), cmp->talker_layer_error.front());
      // Against the official model: its talker logits of the first 8 frames and the code predictor's
      // of frame 0, recorded by the goldens.
      const auto official = c->golden.f32("talker_logits_first8"), official_cp = c->golden.f32("cp_frame0_logits");
      const double e_off = std::max(rel_error(pass.c0_logits.data(), official.data(), official.size()),
                                    rel_error(pass.cp_logits.data(), official_cp.data(), official_cp.size()));
      EXPECT_LT(e_off, std::max(bounds_for(f).c0_logit, bounds_for(f).cp_logit)) << "against the official logits";
      worst_c0 = std::max(worst_c0, cmp->c0_logit_error);
      worst_cp = std::max(worst_cp, cmp->cp_logit_error);
      worst_kl = std::max(worst_kl, cmp->c0_kl_mean);
      min_top1 = std::min(min_top1, cmp->c0_top1);
      min_cp_top1 = std::min(min_cp_top1, cmp->cp_top1_mean);
      worst_official = std::max(worst_official, e_off);
      for (double e : cmp->talker_layer_error) worst_layer = std::max(worst_layer, e);
      for (double e : cmp->cp_layer_error) worst_layer = std::max(worst_layer, e);
    }
    std::printf("[quant] %s over 9 cases: logit error c0 %.4f cp %.4f, KL %.2e, top-1 c0 >= %.3f cp >= %.3f, "
                "layers %.4f, vs official %.4f\n",
                cpu::weight_format_name(f), worst_c0, worst_cp, worst_kl, min_top1, min_cp_top1, worst_layer, worst_official);
  }
}

TEST(QuantQuality, PlantedQuantiserMistakesBreakTheBounds) {
  const auto& c = *gen_cases()[0];
  const CaseRun r = reference(c);
  for (auto fault : {cpu::testing::QuantFault::kScaleOffByOneGroup, cpu::testing::QuantFault::kScaleTooLarge})
    for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
      cpu::testing::plant_quant_fault(fault);
      auto cmp = measure(c, r, f);
      cpu::testing::plant_quant_fault(cpu::testing::QuantFault::kNone);
      ASSERT_TRUE(cmp.ok());
      std::printf("[quant] planted fault %d, %s:%s\n", static_cast<int>(fault), cpu::weight_format_name(f),
                  violations(*cmp, bounds_for(f)).c_str());
      EXPECT_NE(violations(*cmp, bounds_for(f)), "")
          << "planted fault " << static_cast<int>(fault) << " in " << cpu::weight_format_name(f) << " went unnoticed";
    }
  auto clean = measure(c, r, WeightFormat::kInt8);  // and the same case passes without the fault
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(violations(*clean, bounds_for(WeightFormat::kInt8)), "");
}

}  // namespace
}  // namespace chorus::test
