// How a model keeps its large linear layers: as stored (bf16 in published checkpoints; the exact
// mode), or quantised at load (int8 / int4: quant.h for the CPU kernels; int8 / fp8: row_quant.h
// for the CUDA kernels, which have no int4 and the CPU no fp8). Kept free of other includes: the
// ISA-specific kernel files include it, and must not instantiate inline code shared with the
// portable build.
#pragma once

#include <cstdint>

namespace chorus::cpu {

enum class WeightFormat : uint8_t { kBf16, kInt8, kInt4, kFp8 };

}  // namespace chorus::cpu
