// Shared DSP for model front ends: windows, the Slaney mel filterbank (librosa's default) and a
// log-mel spectrogram. Defaults are the Qwen3-TTS speaker-encoder front end (spec §4.4):
// reflect-pad 384 each side, STFT n_fft 1024 / hop 256 / periodic Hann, no centring, magnitude
// sqrt(re^2 + im^2 + 1e-9), 128 Slaney mels over 0..12 kHz at 24 kHz, log(max(mel, 1e-5)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace chorus::audio {

// w[i] = 0.5 - 0.5 cos(2 pi i / n): the periodic window (torch.hann_window default).
std::vector<float> periodic_hann_window(int n);

// Slaney mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above (27 mels per
// factor 6.4).
double hz_to_mel_slaney(double hz);
double mel_to_hz_slaney(double mel);

// Triangular filters on the Slaney mel scale with Slaney area normalisation (each filter scaled by
// 2 / its width in Hz), over the n_fft/2+1 one-sided bins. Row-major [n_mels, n_fft/2 + 1], double.
std::vector<double> slaney_mel_filterbank(double sample_rate, int n_fft, int n_mels, double fmin, double fmax);

struct MelConfig {
  int sample_rate = 24000;
  int n_fft = 1024;  // also the window length; even
  int hop = 256;
  int n_mels = 128;
  double fmin = 0.0;
  double fmax = 12000.0;
  int reflect_pad = 384;        // samples mirrored onto each end before framing ((n_fft - hop) / 2)
  double magnitude_eps = 1e-9;  // inside the square root
  double log_floor = 1e-5;      // log(max(mel, floor))
};

class MelSpectrogram {
 public:
  static Result<MelSpectrogram> create(const MelConfig& cfg = {});

  // Frames produced for n input samples (0 when the input is too short).
  int64_t num_frames(size_t n) const;
  // Log-mel features of mono samples at cfg.sample_rate: f32 tensor [frames, n_mels].
  // Thread-safe (no shared scratch).
  Result<Tensor> compute(const float* samples, size_t n) const;

  const MelConfig& config() const { return cfg_; }

 private:
  struct Filter {  // one mel filter's non-zero span of FFT bins
    int first_bin = 0;
    std::vector<double> weights;
  };
  MelConfig cfg_;
  std::vector<float> window_;
  std::vector<Filter> filters_;
};

}  // namespace chorus::audio
