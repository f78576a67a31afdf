// AVX2 + FMA + F16C micro kernels (placeholder until the vector version lands).
#include "runtime/cpu/micro_kernels.h"

namespace chorus::cpu::detail {
const MicroKernels* avx2_kernels() { return nullptr; }
}  // namespace chorus::cpu::detail
