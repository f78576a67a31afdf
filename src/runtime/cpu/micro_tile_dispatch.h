// Internal to the ISA files (micro_kernels_*.cpp): the MicroKernels::dot_tile entry, which turns
// the run-time tile shape (mr, nr) and weight dtype into the ISA's compile-time tile.
//
// Tiles: a type in the ISA file's anonymous namespace with
//   template <int MR, int NR, class W>
//   static void run(int64_t K, const float* a, int64_t lda, const typename W::T* b, int64_t ldb,
//                   const char* next, float* out);
// and F32, Bf16, F16 its weight readers (each with `using T = <element type>`). Because Tiles has
// internal linkage, so has every instantiation below: each ISA file compiles its own copy with its
// own target flags, and the linker can never hand one ISA's code to another.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "runtime/cpu/micro_kernels.h"

namespace chorus::cpu::detail {

template <class Tiles, class W, int MR>
void dot_tile_rows_of(int nr, int64_t K, const float* a, int64_t lda, const void* bv, int64_t ldb, const char* next,
                      float* out) {
  static_assert(kTileMax == 4, "the switches below cover 1..kTileMax");
  const auto* b = static_cast<const typename W::T*>(bv);
  switch (nr) {
    case 1: return Tiles::template run<MR, 1, W>(K, a, lda, b, ldb, next, out);
    case 2: return Tiles::template run<MR, 2, W>(K, a, lda, b, ldb, next, out);
    case 3: return Tiles::template run<MR, 3, W>(K, a, lda, b, ldb, next, out);
    default: return Tiles::template run<MR, 4, W>(K, a, lda, b, ldb, next, out);
  }
}

template <class Tiles, class W>
void dot_tile_typed_of(int mr, int nr, int64_t K, const float* a, int64_t lda, const void* b, int64_t ldb,
                       const char* next, float* out) {
  switch (mr) {
    case 1: return dot_tile_rows_of<Tiles, W, 1>(nr, K, a, lda, b, ldb, next, out);
    case 2: return dot_tile_rows_of<Tiles, W, 2>(nr, K, a, lda, b, ldb, next, out);
    case 3: return dot_tile_rows_of<Tiles, W, 3>(nr, K, a, lda, b, ldb, next, out);
    default: return dot_tile_rows_of<Tiles, W, 4>(nr, K, a, lda, b, ldb, next, out);
  }
}

// Matches MicroKernels::dot_tile.
template <class Tiles, class F32, class Bf16, class F16>
void dot_tile_of(int mr, int nr, int64_t K, const float* a, int64_t lda, DType bt, const void* b, int64_t ldb,
                 const void* next_v, float* out) {
  const auto* next = static_cast<const char*>(next_v);
  switch (bt) {
    case DType::kF32: return dot_tile_typed_of<Tiles, F32>(mr, nr, K, a, lda, b, ldb, next, out);
    case DType::kBF16: return dot_tile_typed_of<Tiles, Bf16>(mr, nr, K, a, lda, b, ldb, next, out);
    case DType::kF16: return dot_tile_typed_of<Tiles, F16>(mr, nr, K, a, lda, b, ldb, next, out);
    default: std::fill(out, out + mr * nr, 0.0f);  // the drivers only pass float weights
  }
}

}  // namespace chorus::cpu::detail
