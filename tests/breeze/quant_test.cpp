// int8 / int4 weights on the tiny Breeze TTS 2 model: the backbone's prefill of every golden
// layout and the depth decoder's logits of a golden frame, against the bf16 weights (relative RMS
// error of every hidden state and logit) and against the official logits recorded in the goldens.
// Bounds are about twice the worst measured; the planted quantiser mistakes must break them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "breeze_test_util.h"
#include "models/breeze_tts/backbone.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/depth_decoder.h"
#include "models/breeze_tts/prompt.h"
#include "models/breeze_tts/weights.h"
#include "runtime/cpu/quant.h"

namespace chorus::breeze_tts {
namespace {

using cpu::WeightFormat;

struct Errors {
  double backbone = 0, logits = 0, depth = 0, official = 0;  // relative RMS errors (worst over prompts)
};

double rel_error(const float* got, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

struct Prompts {
  ModelFiles files;
  std::map<std::string, Tensor> rows;  // layout name -> prefill rows
};

const Prompts& prompts() {
  static const Prompts* p = [] {
    auto files = open_model_files(test::tiny_model_dir());
    if (!files.ok()) throw std::runtime_error(files.error().to_string());
    auto enc = TextEncoder::create(files->config, files->main);
    if (!enc.ok()) throw std::runtime_error(enc.error().to_string());
    std::ifstream in(chorus::test::reference_path("breeze_tts2/manifest.json"));
    const auto manifest = nlohmann::json::parse(in);
    const auto& ids = manifest["prompt_token_ids"];
    PromptParts parts;
    parts.text = ids["TEXT"].get<std::vector<int32_t>>();
    parts.instruct = ids["INSTR"].get<std::vector<int32_t>>();
    parts.ref_text = ids["REF_TEXT"].get<std::vector<int32_t>>();
    parts.ref.codes = test::Golden("prefill_clone").ids("input_values");
    parts.ref.frames = static_cast<int64_t>(parts.ref.codes.size()) / 16;
    auto* out = new Prompts{std::move(*files), {}};
    const Tensor table = out->files.main.tensor(kAudioTable);
    const std::pair<const char*, Layout> layouts[] = {
        {"plain", Layout::kPlain}, {"clone", Layout::kClone}, {"design", Layout::kDesign}, {"direction", Layout::kDirection}};
    for (const auto& [name, layout] : layouts) {
      auto l = build_layout(out->files.config, layout, parts);
      if (!l.ok()) throw std::runtime_error(l.error().to_string());
      auto rows = prompt_rows(out->files.config, *l, parts.ref, *enc, table);
      if (!rows.ok()) throw std::runtime_error(rows.error().to_string());
      out->rows[name] = std::move(*rows);
    }
    return out;
  }();
  return *p;
}

struct Stages {
  Backbone backbone;
  DepthDecoder depth;
};

Stages load(WeightFormat f) {
  const Prompts& p = prompts();
  auto bb = Backbone::load(p.files.config, p.files.main, f);
  auto dd = DepthDecoder::load(p.files.config, p.files.main, f);
  EXPECT_TRUE(bb.ok() && dd.ok());
  return {std::move(*bb), std::move(*dd)};
}

struct Outputs {
  std::map<std::string, std::vector<float>> hidden, logits, depth;
};

Outputs run(const Stages& s) {
  const Prompts& p = prompts();
  Outputs o;
  const int64_t H = s.backbone.hidden(), V = s.backbone.classes(), D = s.depth.vocab(), n = s.depth.codebooks() - 1;
  for (const auto& [name, rows] : p.rows) {
    const int64_t P = rows.dim(0);
    nn::KvCache cache = s.backbone.make_cache();
    const nn::SequenceRows seq{&cache, 0, P};
    std::vector<float> hidden(static_cast<size_t>(P * H)), logits(static_cast<size_t>(V));
    EXPECT_TRUE(s.backbone.forward({&seq, 1}, rows.f32(), hidden.data(), logits.data(), nullptr).ok());
    // The depth decoder from the last hidden state, on a fixed frame (codes 7, 8, ...).
    std::vector<int32_t> codes(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) codes[static_cast<size_t>(k)] = static_cast<int32_t>((7 + 13 * k) % D);
    std::vector<float> dl(static_cast<size_t>(n * D));
    EXPECT_TRUE(s.depth.recompute(hidden.data() + (P - 1) * H, codes, dl.data(), nullptr).ok());
    o.hidden[name] = std::move(hidden);
    o.logits[name] = std::move(logits);
    o.depth[name] = std::move(dl);
  }
  return o;
}

Errors compare(const Outputs& ref, const Outputs& q) {
  Errors e;
  for (const auto& [name, h] : ref.hidden) {
    e.backbone = std::max(e.backbone, rel_error(q.hidden.at(name).data(), h.data(), h.size()));
    e.logits = std::max(e.logits, rel_error(q.logits.at(name).data(), ref.logits.at(name).data(), ref.logits.at(name).size()));
    e.depth = std::max(e.depth, rel_error(q.depth.at(name).data(), ref.depth.at(name).data(), ref.depth.at(name).size()));
    // The official last-row logits of this layout's prefill.
    test::Golden g(std::string("prefill_") + name);
    const Tensor want = g.f32("logits");
    const int64_t V = static_cast<int64_t>(ref.logits.at(name).size()), P = want.dim(0);
    e.official = std::max(e.official, rel_error(q.logits.at(name).data(), want.f32() + (P - 1) * V, static_cast<size_t>(V)));
  }
  return e;
}

Errors bounds_for(WeightFormat f) {
  if (f == WeightFormat::kInt8) return {0.02, 0.02, 0.025, 0.02};
  return {0.30, 0.26, 0.33, 0.26};
}

bool within(const Errors& e, const Errors& b) {
  return e.backbone <= b.backbone && e.logits <= b.logits && e.depth <= b.depth && e.official <= b.official;
}

const Outputs& reference() {
  static const Outputs o = run(load(WeightFormat::kBf16));
  return o;
}

TEST(BreezeQuant, Int8AndInt4StayWithinTheBounds) {
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    const Errors e = compare(reference(), run(load(f)));
    std::printf("[quant] %s: backbone hidden %.4f, logits %.4f, depth logits %.4f, vs official %.4f\n",
                cpu::weight_format_name(f), e.backbone, e.logits, e.depth, e.official);
    EXPECT_TRUE(within(e, bounds_for(f))) << cpu::weight_format_name(f);
    EXPECT_GT(e.logits, 1e-6) << "no error at all: the weights were not quantised";
  }
}

TEST(BreezeQuant, PlantedQuantiserMistakesBreakTheBounds) {
  for (auto fault : {cpu::testing::QuantFault::kScaleOffByOneGroup, cpu::testing::QuantFault::kScaleTooLarge})
    for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
      cpu::testing::plant_quant_fault(fault);
      const Stages s = load(f);
      cpu::testing::plant_quant_fault(cpu::testing::QuantFault::kNone);
      const Errors e = compare(reference(), run(s));
      std::printf("[quant] planted fault %d, %s: backbone hidden %.4f, logits %.4f, depth logits %.4f\n",
                  static_cast<int>(fault), cpu::weight_format_name(f), e.backbone, e.logits, e.depth);
      EXPECT_FALSE(within(e, bounds_for(f))) << "fault " << static_cast<int>(fault) << " in "
                                             << cpu::weight_format_name(f) << " went unnoticed";
    }
}

}  // namespace
}  // namespace chorus::breeze_tts
