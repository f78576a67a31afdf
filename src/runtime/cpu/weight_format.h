// How a model keeps its large linear layers: as stored (bf16 in published checkpoints; the exact
// mode), or quantised at load (quant.h). Kept free of other includes: the ISA-specific kernel files
// include it, and must not instantiate inline code shared with the portable build.
#pragma once

#include <cstdint>

namespace chorus::cpu {

enum class WeightFormat : uint8_t { kBf16, kInt8, kInt4 };

}  // namespace chorus::cpu
