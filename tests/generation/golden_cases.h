// The nine gen_* golden cases of the official Qwen3-TTS code (shared/reference/qwen3_tts): their
// inputs (from manifest.json), models and recorded tensors.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "io/safetensors.h"
#include "models/qwen3_tts/model.h"
#include "models/qwen3_tts/prompt.h"

namespace chorus::test {

struct Golden {
  io::SafetensorsFile file;
  bool has(const std::string& name) const { return file.find(name) != nullptr; }
  Shape shape(const std::string& name) const;
  std::vector<float> f32(const std::string& name) const;
  std::vector<int32_t> i32(const std::string& name) const;
};
Golden load_golden(const std::string& rel);  // e.g. "goldens/gen_vd_auto_stream.safetensors"; aborts the test on failure

struct GenCase {
  std::string id;         // "gen_cv_ryan_english_nonstream"
  std::string model_dir;  // "models/tiny_custom_voice"
  qwen3_tts::PromptInputs inputs;  // speaker embedding and reference codes filled from the golden
  Golden golden;
};

// All gen_* cases in manifest order.
const std::vector<std::shared_ptr<GenCase>>& gen_cases();

// The tiny model of a folder under shared/reference/qwen3_tts (loaded once, single-threaded kernels).
std::shared_ptr<const qwen3_tts::Model> tiny_model(const std::string& model_dir);

// The manifest's wrapped prompt token ids.
struct PromptIds {
  std::vector<int32_t> text, ref_text, instruct;
};
const PromptIds& prompt_ids();

float max_abs_diff(const float* a, const float* b, size_t n);

// The case's inputs as an engine request: greedy, 40 frames (EOS masked), the golden's text layout
// or, with `use_model_default_layout`, the model's default.
engine::SynthesisRequest golden_request(const GenCase& c, bool use_model_default_layout);

}  // namespace chorus::test
