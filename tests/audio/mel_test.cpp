// The speaker-encoder mel front end against the official PyTorch output (golden `mel` of
// shared/reference/qwen3_tts/goldens/speaker_encoder.safetensors), its filterbank against the
// stored librosa-equivalent one, and the kissfft path against a naive double-precision DFT.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "audio/mel.h"
#include "audio_test_util.h"
#include "io/safetensors.h"
#include "support/test_support.h"

namespace chorus::audio {
namespace {

struct Golden {
  io::SafetensorsFile file;
  Tensor get(const std::string& name) const {
    const io::TensorInfo* info = file.find(name);
    return info ? file.tensor(*info).to_f32() : Tensor();
  }
};

Golden load_golden() {
  auto f = io::SafetensorsFile::open(test::reference_path("qwen3_tts/goldens/speaker_encoder.safetensors"));
  EXPECT_TRUE(f.ok()) << f.error().to_string();
  return Golden{std::move(f).value()};
}

TEST(Mel, PeriodicHannWindow) {
  const auto w = periodic_hann_window(1024);
  ASSERT_EQ(w.size(), 1024u);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_FLOAT_EQ(w[256], 0.5f);
  EXPECT_FLOAT_EQ(w[512], 1.0f);
  EXPECT_FLOAT_EQ(w[768], 0.5f);
  EXPECT_FLOAT_EQ(w[1], w[1023]);  // periodic: symmetric around n/2, w[n-1] != 0
  EXPECT_GT(w[1023], 0.0f);
}

TEST(Mel, SlaneyScaleFixedPoints) {
  // Linear part: 200/3 Hz per mel; log part: 27 mels per factor 6.4 above 1 kHz.
  EXPECT_DOUBLE_EQ(hz_to_mel_slaney(0), 0);
  EXPECT_NEAR(hz_to_mel_slaney(200), 3.0, 1e-12);
  EXPECT_NEAR(hz_to_mel_slaney(1000), 15.0, 1e-12);
  EXPECT_NEAR(hz_to_mel_slaney(6400), 42.0, 1e-12);
  for (double hz : {0.0, 50.0, 999.0, 1000.0, 1234.5, 12000.0}) EXPECT_NEAR(mel_to_hz_slaney(hz_to_mel_slaney(hz)), hz, 1e-9);
}

TEST(Mel, FilterbankMatchesGolden) {
  const Golden g = load_golden();
  const Tensor ref = g.get("mel_filterbank");
  ASSERT_EQ(ref.shape(), (Shape{128, 513}));
  const auto fb = slaney_mel_filterbank(24000, 1024, 128, 0, 12000);
  ASSERT_EQ(fb.size(), 128u * 513u);
  double max_err = 0, max_ref = 0;
  size_t nonzero = 0;
  for (size_t i = 0; i < fb.size(); ++i) {
    max_err = std::max(max_err, std::fabs(fb[i] - ref.f32()[i]));
    max_ref = std::max(max_ref, double(std::fabs(ref.f32()[i])));
    nonzero += ref.f32()[i] != 0.0f;
  }
  ASSERT_GT(max_ref, 1e-3);   // not a zero tensor
  ASSERT_GT(nonzero, 500u);   // every bin below 12 kHz lies in one or two filters
  EXPECT_LT(max_err, 1e-6 * max_ref) << "max abs error " << max_err << " (max value " << max_ref << ")";
  std::printf("filterbank max abs error %.3g (max value %.3g)\n", max_err, max_ref);
}

TEST(Mel, MatchesGoldenOnTheTestWave) {
  const Golden g = load_golden();
  const Tensor wave = g.get("wave_3s");
  const Tensor ref = g.get("mel");
  ASSERT_EQ(wave.shape(), (Shape{72000}));
  ASSERT_EQ(ref.shape(), (Shape{281, 128}));
  auto mel = MelSpectrogram::create();
  ASSERT_TRUE(mel.ok());
  EXPECT_EQ(mel->num_frames(72000), 281);  // floor((72000 + 768 - 1024) / 256) + 1
  auto out = mel->compute(wave.f32(), 72000);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  ASSERT_EQ(out->shape(), (Shape{281, 128}));
  double max_err = 0, lo = 1e9, hi = -1e9;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    max_err = std::max(max_err, double(std::fabs(out->f32()[i] - ref.f32()[i])));
    lo = std::min(lo, double(ref.f32()[i]));
    hi = std::max(hi, double(ref.f32()[i]));
  }
  ASSERT_GT(hi - lo, 5.0);  // a real spectrogram, not a constant
  EXPECT_LT(max_err, 5e-5);  // measured 1.7e-5 (the golden is float32 PyTorch; vs exact double: 6e-6)
  std::printf("mel vs golden: max abs error %.3g (golden range [%.3g, %.3g])\n", max_err, lo, hi);
}

// Independent reference: direct DFT in double of the explicitly padded, windowed frames.
TEST(Mel, MatchesNaiveDoubleDft) {
  const int n_fft = 1024, hop = 256, pad = 384, n_bins = 513;
  std::vector<float> x = testutil::sine(6000, 24000, 440.0, 0.3);
  for (size_t i = 0; i < x.size(); ++i) x[i] += static_cast<float>(0.1 * std::sin(0.37 * static_cast<double>(i * i % 1000)));
  auto mel = MelSpectrogram::create();
  ASSERT_TRUE(mel.ok());
  auto out = mel->compute(x.data(), x.size());
  ASSERT_TRUE(out.ok());
  const int64_t frames = out->dim(0);
  ASSERT_EQ(frames, (6000 + 2 * pad - n_fft) / hop + 1);

  const auto fb = slaney_mel_filterbank(24000, n_fft, 128, 0, 12000);
  const int n = static_cast<int>(x.size());
  const auto at = [&](int j) {  // reflect padding, written out from its definition
    const int i = j - pad;
    return static_cast<double>(i < 0 ? x[-i] : (i >= n ? x[2 * (n - 1) - i] : x[i]));
  };
  double max_err = 0;
  std::vector<double> mag(n_bins);
  for (int64_t t = 0; t < frames; ++t) {
    for (int k = 0; k < n_bins; ++k) {
      double re = 0, im = 0;
      for (int i = 0; i < n_fft; ++i) {
        const double w = 0.5 - 0.5 * std::cos(2 * std::numbers::pi * i / n_fft);
        const double v = at(static_cast<int>(t * hop) + i) * w;
        const double ang = -2 * std::numbers::pi * static_cast<double>(k) * i / n_fft;
        re += v * std::cos(ang);
        im += v * std::sin(ang);
      }
      mag[k] = std::sqrt(re * re + im * im + 1e-9);
    }
    for (int m = 0; m < 128; ++m) {
      double acc = 0;
      for (int k = 0; k < n_bins; ++k) acc += fb[m * n_bins + k] * mag[k];
      const double want = std::log(std::max(acc, 1e-5));
      max_err = std::max(max_err, std::fabs(want - out->f32()[t * 128 + m]));
    }
  }
  EXPECT_LT(max_err, 2e-5);
  std::printf("mel vs naive double DFT: max abs error %.3g\n", max_err);
}

TEST(Mel, RejectsTooShortInputAndBadConfig) {
  auto mel = MelSpectrogram::create();
  ASSERT_TRUE(mel.ok());
  std::vector<float> x(384, 0.1f);  // reflect padding needs more than 384 samples
  EXPECT_FALSE(mel->compute(x.data(), x.size()).ok());
  x.resize(385);
  auto ok = mel->compute(x.data(), x.size());
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->dim(0), 1);  // 385 + 768 - 1024 = 129 < 256: one frame
  EXPECT_FALSE(mel->compute(nullptr, 0).ok());
  MelConfig bad;
  bad.n_fft = 1023;
  EXPECT_FALSE(MelSpectrogram::create(bad).ok());
  bad = {};
  bad.fmax = 13000;  // above Nyquist
  EXPECT_FALSE(MelSpectrogram::create(bad).ok());
}

TEST(Mel, SilenceHitsTheLogFloor) {
  auto mel = MelSpectrogram::create();
  ASSERT_TRUE(mel.ok());
  const std::vector<float> x(4000, 0.0f);
  auto out = mel->compute(x.data(), x.size());
  ASSERT_TRUE(out.ok());
  // |X| = sqrt(1e-9) per bin and a Slaney filter's weights sum to ~1/23.4 Hz, so mel ~ 1.4e-6 < 1e-5.
  for (int64_t i = 0; i < out->numel(); ++i) ASSERT_FLOAT_EQ(out->f32()[i], static_cast<float>(std::log(1e-5)));
}

}  // namespace
}  // namespace chorus::audio
