// Access to the Breeze TTS 2 reference material (shared/reference/breeze_tts2) for the tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "support/test_support.h"

namespace chorus::breeze_tts::test {

inline std::string tiny_model_dir() { return chorus::test::reference_path("breeze_tts2/models/tiny_breeze"); }
inline std::string golden_path(const std::string& name) {
  return chorus::test::reference_path("breeze_tts2/goldens/" + name + ".safetensors");
}

// One golden file, opened once per call site.
class Golden {
 public:
  explicit Golden(const std::string& name) {
    auto f = io::SafetensorsFile::open(golden_path(name));
    if (!f.ok()) {
      ADD_FAILURE() << f.error().to_string();
      return;
    }
    file_ = std::move(*f);
    ok_ = true;
  }
  bool ok() const { return ok_; }
  bool has(const std::string& name) const { return ok_ && file_.find(name) != nullptr; }
  // f32 copy of a float tensor (empty tensor, and a test failure, when absent).
  Tensor f32(const std::string& name) const {
    const io::TensorInfo* info = ok_ ? file_.find(name) : nullptr;
    if (!info) {
      ADD_FAILURE() << "golden tensor " << name << " not found";
      return {};
    }
    return file_.tensor(*info).to_f32();
  }
  std::vector<int32_t> ids(const std::string& name) const {
    const io::TensorInfo* info = ok_ ? file_.find(name) : nullptr;
    if (!info || info->dtype != DType::kI32) {
      ADD_FAILURE() << "golden int32 tensor " << name << " not found";
      return {};
    }
    const Tensor t = file_.tensor(*info);
    return std::vector<int32_t>(t.as<int32_t>(), t.as<int32_t>() + t.numel());
  }

 private:
  io::SafetensorsFile file_;
  bool ok_ = false;
};

// Flat reference codes ([frames · codebooks], as the goldens' "input_values") as the frames that
// SynthesisRequest::ref_codes takes.
inline std::vector<std::vector<int32_t>> code_frames(const std::vector<int32_t>& flat, size_t codebooks = 16) {
  std::vector<std::vector<int32_t>> frames;
  for (size_t k = 0; k + codebooks <= flat.size(); k += codebooks)
    frames.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(k),
                        flat.begin() + static_cast<std::ptrdiff_t>(k + codebooks));
  return frames;
}

// max |a - b| over equal-sized float arrays; also checks the reference is not trivially zero so a
// comparison cannot pass vacuously.
inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double worst = 0.0, ref_max = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    ref_max = std::max(ref_max, std::fabs(static_cast<double>(b[i])));
  }
  EXPECT_GT(ref_max, 1e-3) << "reference values are all ~0: the comparison would be vacuous";
  return worst;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  return max_abs_diff(a.f32(), b.f32(), a.numel());
}

}  // namespace chorus::breeze_tts::test
