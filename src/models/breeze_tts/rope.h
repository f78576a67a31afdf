// RoPE frequencies of the Breeze depth decoder: HF's "llama3" scaling of the default frequencies
// (breeze_tts2.md §4.4). With positions only 0..15, an error here corrupts codebooks 8..15 while
// 0..7 still sound plausible, so it is computed exactly as PyTorch does it in f32.
#pragma once

#include <vector>

#include "models/breeze_tts/config.h"

namespace chorus::breeze_tts {

// [head_dim / 2] frequencies: theta^(-2i/d) (f32, as PyTorch), then, when scaling is enabled, with
// wavelength λ = 2π/ν: λ > L0/low → ν/factor; λ < L0/high → ν; otherwise the smooth blend
// (1 − s)·ν/factor + s·ν with s = (L0/λ − low)/(high − low).
std::vector<float> llama3_inv_freq(double theta, int64_t head_dim, const Llama3RopeScaling& scaling);
std::vector<float> depth_rope_inv_freq(const DepthDecoderConfig& c);

}  // namespace chorus::breeze_tts
