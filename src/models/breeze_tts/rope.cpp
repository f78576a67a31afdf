#include "models/breeze_tts/rope.h"

#include "runtime/cpu/kernels.h"

namespace chorus::breeze_tts {

std::vector<float> llama3_inv_freq(double theta, int64_t head_dim, const Llama3RopeScaling& s) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2));
  cpu::rope_inv_freq(static_cast<float>(theta), head_dim, inv.data());
  if (!s.enabled) return inv;
  // PyTorch evaluates these tensor-scalar expressions in f32 (scalars rounded to f32); the two
  // band edges are compared as Python floats against the f32 wavelengths.
  const float factor = static_cast<float>(s.factor), lo = static_cast<float>(s.low_freq_factor),
              old_len = static_cast<float>(s.original_max_positions);
  const double low_freq_wavelen = static_cast<double>(s.original_max_positions) / s.low_freq_factor;
  const double high_freq_wavelen = static_cast<double>(s.original_max_positions) / s.high_freq_factor;
  const float two_pi = static_cast<float>(6.283185307179586);
  const float band = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& nu : inv) {
    const float wavelen = two_pi / nu;
    const float scaled = wavelen > low_freq_wavelen ? nu / factor : nu;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_len / wavelen - lo) / band;
      nu = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      nu = scaled;
    }
  }
  return inv;
}

std::vector<float> depth_rope_inv_freq(const DepthDecoderConfig& c) {
  return llama3_inv_freq(c.dims.rope_theta, c.dims.head_dim, c.rope_scaling);
}

}  // namespace chorus::breeze_tts
