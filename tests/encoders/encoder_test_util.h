// Shared helpers of the encoder tests: golden tensors, the tiny Base model, comparisons.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/qwen3_tts/model.h"
#include "support/test_support.h"

namespace chorus::test {

inline std::string q3_path(const std::string& rel) { return reference_path("qwen3_tts/" + rel); }
inline std::string tiny_base_dir() { return q3_path("models/tiny_base"); }

struct GoldenFile {
  io::SafetensorsFile file;
  Shape shape(const std::string& name) const {
    const auto* i = file.find(name);
    return i ? i->shape : Shape{};
  }
  std::vector<float> f32(const std::string& name) const {
    const auto* i = file.find(name);
    if (!i || i->dtype != DType::kF32) {
      ADD_FAILURE() << "golden " << name << " missing or not f32";
      return {};
    }
    const Tensor t = file.tensor(*i);
    return {t.f32(), t.f32() + t.numel()};
  }
  std::vector<int32_t> i32(const std::string& name) const {
    const auto* i = file.find(name);
    if (!i || i->dtype != DType::kI32) {
      ADD_FAILURE() << "golden " << name << " missing or not i32";
      return {};
    }
    const Tensor t = file.tensor(*i);
    return {t.as<int32_t>(), t.as<int32_t>() + t.numel()};
  }
};

inline GoldenFile golden(const std::string& name) {  // "speech_encoder" -> goldens/speech_encoder.safetensors
  auto f = io::SafetensorsFile::open(q3_path("goldens/" + name + ".safetensors"));
  if (!f.ok()) {
    ADD_FAILURE() << f.error().to_string();
    return GoldenFile{};
  }
  return GoldenFile{std::move(f).value()};
}

struct Diff {
  double max_abs = 0, max_ref = 0;
  bool bad = false;  // size mismatch or non-finite
};

inline Diff compare(const float* ours, const std::vector<float>& ref) {
  Diff d;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(double(ours[i]) - ref[i]);
    if (!std::isfinite(e)) d.bad = true;
    d.max_abs = std::max(d.max_abs, e);
    d.max_ref = std::max(d.max_ref, std::fabs(double(ref[i])));
  }
  return d;
}

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// The tiny Base checkpoint's files, opened once.
inline const qwen3_tts::ModelFiles& tiny_base_files() {
  static const std::shared_ptr<qwen3_tts::ModelFiles> files = [] {
    auto f = qwen3_tts::open_model_files(tiny_base_dir());
    if (!f.ok()) {
      ADD_FAILURE() << f.error().to_string();
      return std::shared_ptr<qwen3_tts::ModelFiles>();
    }
    return std::make_shared<qwen3_tts::ModelFiles>(std::move(f).value());
  }();
  if (!files) std::abort();  // nothing below can run
  return *files;
}

}  // namespace chorus::test
