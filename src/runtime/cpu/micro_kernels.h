// Internal: the small block computations that linear, attention and conv are built from. Each ISA
// (portable C++, AVX2+FMA+F16C, AVX-512, AVX-512 VNNI) provides one table; the drivers in
// linear.cpp, attention.cpp and conv.cpp do blocking and threading and call through the active
// table.
//
// Every block fixes the reduction order of each output element independently of the block shape,
// so a result never depends on how the drivers tile the work (M, N, thread split):
//   dot_tile:   8 lane sums over k = 8j + l (j ascending), combined as
//               ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then the k >= 8·⌊K/8⌋ tail in
//               ascending order. AVX2 and AVX-512 use fused multiply-adds (the same values),
//               portable separate ones.
//   axpy_panel: init, then one multiply-add per r in ascending order.
//   qdot_tile:  16 lane sums over k = 16j + l (j ascending); u_l = l_l + l_(l+8), then
//               ((u0 + u4) + (u2 + u6)) + ((u1 + u5) + (u3 + u7)). AVX2 and AVX-512 fuse their
//               multiply-adds, portable does not.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::cpu::detail {

inline constexpr int kTileMax = 4;  // largest mr and nr a dot_tile accepts; axpy_panel's largest mr

struct MicroKernels {
  const char* name;
  // out[m·nr + n] = Σ_k a[m·lda + k] · b[n·ldb + k] for m < mr, n < nr (1 <= mr, nr <= kTileMax);
  // b holds elements of dtype bt (f32, bf16 or f16), lda/ldb count elements.
  // next (nullable): the nr·K contiguous elements of bt the caller reads next; the tile prefetches
  // them as it goes, which keeps one sequential stream ahead of the loads (a matrix-vector product
  // is bound by reading the weights from DRAM, and this doubled its speed on the CI-class CPU).
  void (*dot_tile)(int mr, int nr, int64_t K, const float* a, int64_t lda, DType bt, const void* b,
                   int64_t ldb, const void* next, float* out);
  // c[m·ldc + n] = init[m] + Σ_r a[m·a_sm + r·a_sr] · brows[r][col0 + n] for m < mr
  // (1 <= mr <= kTileMax), n < ncols; init may be nullptr (zero). With `resume`, the sums start
  // from c's values instead (init unused): a panel of R rows split into consecutive calls gives the
  // bits of one call.
  void (*axpy_panel)(int mr, int64_t ncols, int64_t R, const float* a, int64_t a_sm, int64_t a_sr,
                     const float* const* brows, int64_t col0, const float* init, float* c,
                     int64_t ldc, bool resume);
  // One tile of a quantised matrix (quant.h layout): out[m·kQuantRows + r] = Σ_k a[m·lda + k] ·
  // w(r, k) for m < mr (1 <= mr <= kTileMax), r < kQuantRows, k < groups·kQuantGroup, where w is
  // the dequantised weight (int8: q·d; int4: q·d + m, exact in f32 up to the one rounding of + m).
  // codes and scales point at the tile's first group.
  void (*qdot_tile)(WeightFormat format, int mr, int64_t groups, const float* a, int64_t lda,
                    const uint8_t* codes, const uint16_t* scales, float* out);
  // Optional (nullptr: not provided): the same tile for int4 weights with the x rows quantised to
  // int8 per group (QuantizedRows), integer dot products per group, then scaled in f32:
  //   out[m·4 + r] = Σ_g d_(r,g)·s_(m,g)·Σ_j q_(r,g,j)·xq_(m,g,j)  +  Σ_g m_(r,g)·sum_(m,g).
  void (*qdot_tile_int4_q8)(int mr, int64_t groups, const struct QuantizedRows& a, const uint8_t* codes,
                            const uint16_t* scales, float* out);
  // y[i] = x[i] + ib · sin²(a · x[i]) for |a·x[i]| <= kSnakeMaxArg (snake_beta in kernels.h handles
  // the rest); every ISA computes the portable version's operations in its order.
  void (*snake_row)(const float* x, int64_t n, float a, float ib, float* y);
  // x rows per dot_tile when a product has several (batched streams): as many as the registers
  // hold without spilling (AVX2: 3 x 4 accumulators; AVX-512, two weight rows per register: 4), so
  // each weight block is converted and multiplied in as few passes as possible.
  int dot_tile_rows = 3;
  // Optional, beside qdot_tile_int4_q8 (nullptr: portable_quantize_q8): x's rows quantised for that
  // tile, bit for bit as portable_quantize_q8 does.
  void (*quantize_q8)(const float* x, int64_t lda, int64_t M, int64_t groups, int8_t* q, float* scale,
                      float* sum) = nullptr;
};

inline constexpr float kSnakeMaxArg = 8000.0f;

// x rows quantised per group of kQuantGroup for the integer kernels: q[m·ldq + k] = round(x / s)
// in [−127, 127], s = max|x| / 127 of the group (scale[m·lds + g]), and sum[m·lds + g] = Σ x of
// the group in f32 (ascending k), which the int4 offsets multiply.
struct QuantizedRows {
  const int8_t* q = nullptr;
  const float* scale = nullptr;
  const float* sum = nullptr;
  int64_t ldq = 0, lds = 0;
};

// x [M, groups·kQuantGroup] (rows lda apart) → QuantizedRows: q rows groups·kQuantGroup apart, scale
// and sum rows groups apart. s = 0 for an all-zero group (its q are 0).
void portable_quantize_q8(const float* x, int64_t lda, int64_t M, int64_t groups, int8_t* q, float* scale,
                          float* sum);

// The quantised tile layout, shared by the quantiser and the kernels. A tile holds kQuantRows
// consecutive rows (the last one padded with zero rows); for each group of kQuantGroup columns it
// stores the rows' codes one after another, and separately their f16 scales:
//   int8: codes[(g·4 + r)·32 + j] = q (signed), scales[g·4 + r] = d;               w = q·d
//   int4: codes[(g·4 + r)·16 + j] = q_j | q_(j+16) << 4 (unsigned 0..15),
//         scales[g·8 + r] = d, scales[g·8 + 4 + r] = m;                              w = q·d + m
inline constexpr int kQuantRows = 4;
inline constexpr int kQuantGroup = 32;
inline constexpr int64_t quant_code_bytes(WeightFormat f) {  // per row and group
  return f == WeightFormat::kInt8 ? kQuantGroup : kQuantGroup / 2;
}
inline constexpr int64_t quant_scales(WeightFormat f) {  // f16 values per row and group
  return f == WeightFormat::kInt8 ? 1 : 2;
}

const MicroKernels& portable_kernels();
// nullptr when the build has no AVX2 / AVX-512 version (non-x86 targets).
const MicroKernels* avx2_kernels();
const MicroKernels* avx512_kernels();
// AVX-512 plus VNNI (vpdpbusd) for the int4 tile; nullptr when the build has none.
const MicroKernels* avx512_vnni_kernels();
// The portable snake row, which the AVX2 table also uses.
void portable_snake_row(const float* x, int64_t n, float a, float ib, float* y);
// The portable quantised tile.
void portable_qdot_tile(WeightFormat format, int mr, int64_t groups, const float* a, int64_t lda,
                        const uint8_t* codes, const uint16_t* scales, float* out);
// The table selected by set_isa / run-time detection.
const MicroKernels& active_kernels();

}  // namespace chorus::cpu::detail
