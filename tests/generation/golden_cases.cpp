#include "golden_cases.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace chorus::test {

namespace {
std::string q3(const std::string& rel) { return reference_path("qwen3_tts/" + rel); }

nlohmann::json manifest() {
  std::ifstream in(q3("manifest.json"));
  return nlohmann::json::parse(in);
}
}  // namespace

Shape Golden::shape(const std::string& name) const {
  const auto* info = file.find(name);
  return info ? info->shape : Shape{};
}

std::vector<float> Golden::f32(const std::string& name) const {
  const auto* info = file.find(name);
  if (!info || info->dtype != DType::kF32) {
    ADD_FAILURE() << "golden tensor " << name << " missing or not f32";
    return {};
  }
  const Tensor t = file.tensor(*info);
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

std::vector<int32_t> Golden::i32(const std::string& name) const {
  const auto* info = file.find(name);
  if (!info || info->dtype != DType::kI32) {
    ADD_FAILURE() << "golden tensor " << name << " missing or not i32";
    return {};
  }
  const Tensor t = file.tensor(*info);
  return std::vector<int32_t>(t.as<int32_t>(), t.as<int32_t>() + t.numel());
}

Golden load_golden(const std::string& rel) {
  auto f = io::SafetensorsFile::open(q3(rel));
  if (!f.ok()) {
    ADD_FAILURE() << f.error().to_string();
    return Golden{};
  }
  return Golden{std::move(f).value()};
}

const PromptIds& prompt_ids() {
  static const PromptIds ids = [] {
    const auto t = manifest()["prompt_token_ids"];
    const int32_t s = t["im_start"], e = t["im_end"], a = t["assistant"], u = t["user"], nl = t["newline"];
    PromptIds p;
    p.text = {s, a, nl};
    for (int32_t v : t["TEXT_A"]) p.text.push_back(v);
    p.text.insert(p.text.end(), {e, nl, s, a, nl});
    p.ref_text = {s, a, nl};
    for (int32_t v : t["REF_TEXT"]) p.ref_text.push_back(v);
    p.ref_text.insert(p.ref_text.end(), {e, nl});
    p.instruct = {s, u, nl};
    for (int32_t v : t["INSTRUCT"]) p.instruct.push_back(v);
    p.instruct.insert(p.instruct.end(), {e, nl});
    return p;
  }();
  return ids;
}

const std::vector<std::shared_ptr<GenCase>>& gen_cases() {
  static const std::vector<std::shared_ptr<GenCase>> cases = [] {
    std::vector<std::shared_ptr<GenCase>> out;
    const auto m = manifest();
    for (const auto& c : m["cases"]) {
      const std::string id = c["id"];
      if (id.rfind("gen_", 0) != 0) continue;
      auto g = std::make_shared<GenCase>();
      g->id = id;
      g->model_dir = c["model"];
      g->golden = load_golden(c["file"].get<std::string>());
      const auto& in = c["inputs"];
      auto& p = g->inputs;
      p.text_ids = prompt_ids().text;
      if (in.contains("speaker")) p.speaker = in["speaker"];
      if (in.contains("language")) p.language = in["language"];
      if (in.contains("instruct") && !in["instruct"].is_null()) p.instruct_ids = prompt_ids().instruct;
      p.layout = in["non_streaming_mode"].get<bool>() ? qwen3_tts::TextLayout::kFull : qwen3_tts::TextLayout::kStreaming;
      if (g->golden.has("ref_spk_embedding")) p.speaker_embedding = g->golden.f32("ref_spk_embedding");
      if (in.contains("x_vector_only_mode")) p.xvector_only = in["x_vector_only_mode"];
      if (g->golden.has("ref_codes")) {
        const auto codes = g->golden.i32("ref_codes");
        const int64_t G = g->golden.shape("ref_codes")[1];
        for (size_t f = 0; f * G < codes.size(); ++f)
          p.ref_codes.emplace_back(codes.begin() + f * G, codes.begin() + (f + 1) * G);
        p.ref_text_ids = prompt_ids().ref_text;
      }
      out.push_back(g);
    }
    return out;
  }();
  return cases;
}

std::shared_ptr<const qwen3_tts::Model> tiny_model(const std::string& model_dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const qwen3_tts::Model>> models;
  std::lock_guard<std::mutex> lk(mu);
  auto& slot = models[model_dir];
  if (!slot) {
    auto m = qwen3_tts::Model::load(q3(model_dir), nullptr);
    if (!m.ok()) {
      ADD_FAILURE() << m.error().to_string();
      return nullptr;
    }
    slot = *m;
  }
  return slot;
}

float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

engine::SynthesisRequest golden_request(const GenCase& c, bool use_model_default_layout) {
  engine::SynthesisRequest r;
  const auto& in = c.inputs;
  r.text_ids = in.text_ids;
  r.instruct_ids = in.instruct_ids;
  r.speaker = in.speaker;
  r.language = in.language;
  r.speaker_embedding = in.speaker_embedding;
  r.ref_codes = in.ref_codes;
  r.ref_text_ids = in.ref_text_ids;
  r.xvector_only = in.xvector_only;
  r.layout = use_model_default_layout ? engine::TextLayout::kModelDefault
             : in.layout == qwen3_tts::TextLayout::kFull ? engine::TextLayout::kFull
                                                         : engine::TextLayout::kStreaming;
  r.sampler.greedy = true;  // repetition penalty: the checkpoint's 1.05
  r.depth_sampler.greedy = true;
  r.max_frames = 40;
  r.min_frames = 40;
  return r;
}

}  // namespace chorus::test
