#include "audio/mel.h"

#include <kiss_fftr.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <string>

namespace chorus::audio {
namespace {

constexpr double kSlaneyHzPerMel = 200.0 / 3.0;
constexpr double kSlaneyLogStartHz = 1000.0;
constexpr double kSlaneyLogStartMel = kSlaneyLogStartHz / kSlaneyHzPerMel;  // 15
const double kSlaneyLogStep = std::log(6.4) / 27.0;

struct FftrFree {
  void operator()(kiss_fftr_state* s) const { kiss_fftr_free(s); }
};

}  // namespace

std::vector<float> periodic_hann_window(int n) {
  std::vector<float> w(n > 0 ? static_cast<size_t>(n) : 0);
  for (int i = 0; i < n; ++i) {
    w[i] = static_cast<float>(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * i / n));
  }
  return w;
}

double hz_to_mel_slaney(double hz) {
  if (hz < kSlaneyLogStartHz) return hz / kSlaneyHzPerMel;
  return kSlaneyLogStartMel + std::log(hz / kSlaneyLogStartHz) / kSlaneyLogStep;
}

double mel_to_hz_slaney(double mel) {
  if (mel < kSlaneyLogStartMel) return mel * kSlaneyHzPerMel;
  return kSlaneyLogStartHz * std::exp(kSlaneyLogStep * (mel - kSlaneyLogStartMel));
}

std::vector<double> slaney_mel_filterbank(double sample_rate, int n_fft, int n_mels, double fmin, double fmax) {
  if (n_fft < 2 || n_mels < 1 || !(sample_rate > 0)) return {};
  const int n_bins = n_fft / 2 + 1;
  // n_mels + 2 band edges equally spaced in mel; filter m rises over [edge m, m+1], falls over
  // [m+1, m+2].
  const double mel_lo = hz_to_mel_slaney(fmin);
  const double mel_hi = hz_to_mel_slaney(fmax);
  std::vector<double> edge_hz(static_cast<size_t>(n_mels) + 2);
  for (int i = 0; i < n_mels + 2; ++i) {
    edge_hz[i] = mel_to_hz_slaney(mel_lo + (mel_hi - mel_lo) * i / (n_mels + 1));
  }
  std::vector<double> fb(static_cast<size_t>(n_mels) * n_bins, 0.0);
  for (int m = 0; m < n_mels; ++m) {
    const double left = edge_hz[m], centre = edge_hz[m + 1], right = edge_hz[m + 2];
    const double area_norm = 2.0 / (right - left);
    for (int k = 0; k < n_bins; ++k) {
      const double f = k * sample_rate / n_fft;
      const double rising = (f - left) / (centre - left);
      const double falling = (right - f) / (right - centre);
      const double w = std::max(0.0, std::min(rising, falling));
      fb[static_cast<size_t>(m) * n_bins + k] = w * area_norm;
    }
  }
  return fb;
}

Result<MelSpectrogram> MelSpectrogram::create(const MelConfig& cfg) {
  const bool ok = cfg.sample_rate > 0 && cfg.n_fft >= 2 && cfg.n_fft % 2 == 0 && cfg.n_fft <= (1 << 16) &&
                  cfg.hop >= 1 && cfg.n_mels >= 1 && cfg.n_mels <= 4096 && cfg.fmin >= 0 && cfg.fmin < cfg.fmax &&
                  cfg.fmax <= cfg.sample_rate / 2.0 && cfg.reflect_pad >= 0 && cfg.reflect_pad < (1 << 20) &&
                  cfg.magnitude_eps >= 0 && cfg.log_floor > 0;
  if (!ok) return make_error(ErrorCode::kInvalidArgument, "mel spectrogram: invalid configuration");
  MelSpectrogram mel;
  mel.cfg_ = cfg;
  mel.window_ = periodic_hann_window(cfg.n_fft);
  const int n_bins = cfg.n_fft / 2 + 1;
  const std::vector<double> fb = slaney_mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.n_mels, cfg.fmin, cfg.fmax);
  mel.filters_.resize(cfg.n_mels);
  for (int m = 0; m < cfg.n_mels; ++m) {
    const double* row = fb.data() + static_cast<size_t>(m) * n_bins;
    int first = 0, last = n_bins - 1;
    while (first < n_bins && row[first] == 0.0) ++first;
    while (last >= first && row[last] == 0.0) --last;
    Filter& f = mel.filters_[m];
    f.first_bin = first;
    if (first <= last) f.weights.assign(row + first, row + last + 1);
  }
  return mel;
}

int64_t MelSpectrogram::num_frames(size_t n) const {
  const uint64_t padded = static_cast<uint64_t>(n) + 2ull * static_cast<uint64_t>(cfg_.reflect_pad);
  if (n == 0 || padded < static_cast<uint64_t>(cfg_.n_fft)) return 0;
  return static_cast<int64_t>((padded - cfg_.n_fft) / cfg_.hop + 1);
}

Result<Tensor> MelSpectrogram::compute(const float* samples, size_t n) const {
  const size_t pad = static_cast<size_t>(cfg_.reflect_pad);
  // Reflection needs pad < n (it mirrors around the first and last sample).
  if (n <= pad || num_frames(n) == 0) {
    return make_error(ErrorCode::kOutOfRange, "mel spectrogram: " + std::to_string(n) + " samples is too short (need " +
                                                  std::to_string(std::max<size_t>(pad + 1, cfg_.n_fft - 2 * pad)) +
                                                  ")");
  }
  if (!samples) return make_error(ErrorCode::kInvalidArgument, "mel spectrogram: null input");
  const int64_t frames = num_frames(n);
  if (frames > (int64_t{1} << 26)) return make_error(ErrorCode::kResourceExhausted, "mel spectrogram: input too long");

  // x_padded[j] = x[pad - j] before the start, x[2(n-1) - i] past the end.
  std::vector<float> padded(n + 2 * pad);
  for (size_t j = 0; j < pad; ++j) padded[j] = samples[pad - j];
  std::copy(samples, samples + n, padded.begin() + pad);
  for (size_t j = 0; j < pad; ++j) padded[pad + n + j] = samples[n - 2 - j];

  const int n_fft = cfg_.n_fft;
  const int n_bins = n_fft / 2 + 1;
  std::unique_ptr<kiss_fftr_state, FftrFree> fft(kiss_fftr_alloc(n_fft, 0, nullptr, nullptr));
  if (!fft) return make_error(ErrorCode::kResourceExhausted, "mel spectrogram: FFT allocation failed");

  Tensor out = Tensor::zeros(DType::kF32, {frames, cfg_.n_mels});
  float* dst = out.f32();
  std::vector<float> frame(n_fft);
  std::vector<kiss_fft_cpx> spec(n_bins);
  std::vector<double> mag(n_bins);
  for (int64_t t = 0; t < frames; ++t) {
    const float* src = padded.data() + t * cfg_.hop;
    for (int i = 0; i < n_fft; ++i) frame[i] = src[i] * window_[i];
    kiss_fftr(fft.get(), frame.data(), spec.data());
    for (int k = 0; k < n_bins; ++k) {
      const double re = spec[k].r, im = spec[k].i;
      mag[k] = std::sqrt(re * re + im * im + cfg_.magnitude_eps);
    }
    float* row = dst + t * cfg_.n_mels;
    for (int m = 0; m < cfg_.n_mels; ++m) {
      const Filter& f = filters_[m];
      double acc = 0.0;
      for (size_t i = 0; i < f.weights.size(); ++i) acc += f.weights[i] * mag[f.first_bin + i];
      row[m] = static_cast<float>(std::log(std::max(acc, cfg_.log_floor)));
    }
  }
  return out;
}

}  // namespace chorus::audio
