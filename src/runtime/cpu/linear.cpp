// linear (y = x·Wᵀ + b) for float and quantised weights, fused groups of products, and embedding
// gather. Work is split over tiles of 4 output rows (kRowTile = kQuantRows), so float and
// quantised matrices share one driver for fused groups.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/quant.h"

namespace chorus::cpu {

namespace {
constexpr int64_t kRowTile = 4;  // W rows per dot tile (= kTileMax = kQuantRows)
// For M > 1, W is walked in blocks of about this many bytes that stay in L2 while every x row
// passes over them, so W is read from memory once instead of once per x tile.
constexpr int64_t kWeightBlockBytes = 256 * 1024;
static_assert(kRowTile == detail::kQuantRows && kRowTile == detail::kTileMax);

int64_t tiles_of(int64_t rows) { return (rows + kRowTile - 1) / kRowTile; }

// Tiles [t0, t1) of y = x·wᵀ (+ bias) for a float matrix.
void dense_tiles(const detail::MicroKernels& mk, const float* x, int64_t M, const MatrixRef& w, const float* bias,
                 float* y, int64_t t0, int64_t t1) {
  const int64_t N = w.rows, K = w.cols;
  const int64_t es = static_cast<int64_t>(dtype_size(w.dtype));
  const auto* wb = static_cast<const uint8_t*>(w.data);
  const int64_t x_tile = M == 1 ? 1 : mk.dot_tile_rows;
  const int64_t rows_per_block = std::max<int64_t>(kRowTile, kWeightBlockBytes / (K * es) / kRowTile * kRowTile);
  const int64_t n_begin = t0 * kRowTile, n_end = std::min(N, t1 * kRowTile);
  float out[detail::kTileMax * detail::kTileMax];
  for (int64_t nb = n_begin; nb < n_end; nb += rows_per_block) {
    const int64_t nb_end = std::min(n_end, nb + rows_per_block);
    for (int64_t m = 0; m < M; m += x_tile) {
      const int mr = static_cast<int>(std::min(x_tile, M - m));
      for (int64_t n = nb; n < nb_end; n += kRowTile) {
        const int nr = static_cast<int>(std::min(kRowTile, nb_end - n));
        // The first sweep over a block of W reads it from memory: prefetch the next tile.
        const bool prefetch = m == 0 && n + kRowTile < n_end;
        const void* next = prefetch ? wb + (n + kRowTile) * K * es : nullptr;
        mk.dot_tile(mr, nr, K, x + m * K, K, w.dtype, wb + n * K * es, K, next, out);
        for (int i = 0; i < mr; ++i)
          for (int j = 0; j < nr; ++j)
            y[(m + i) * N + n + j] = bias ? out[i * nr + j] + bias[n + j] : out[i * nr + j];
      }
    }
  }
}

// x rows quantised to int8 per group (detail::QuantizedRows), for the integer int4 tiles. The
// buffers are the calling thread's and reused: a decode step quantises x for every product.
struct RowsQ8 {
  std::vector<int8_t> q;
  std::vector<float> scale, sum;
};

// x [M, groups·kGroup] (rows lda apart) → the view of this thread's quantised rows, valid until
// its next call.
detail::QuantizedRows quantize_rows(const detail::MicroKernels& mk, const float* x, int64_t lda, int64_t M,
                                    int64_t groups) {
  thread_local RowsQ8 r;
  const int64_t width = groups * detail::kQuantGroup;
  r.q.resize(static_cast<size_t>(M * width));
  r.scale.resize(static_cast<size_t>(M * groups));
  r.sum.resize(r.scale.size());
  const auto quantize = mk.quantize_q8 ? mk.quantize_q8 : detail::portable_quantize_q8;
  quantize(x, lda, M, groups, r.q.data(), r.scale.data(), r.sum.data());
  return {r.q.data(), r.scale.data(), r.sum.data(), width, groups};
}

// Whether w's products take x quantised to int8 (the active kernels' int4 integer tile).
bool uses_q8(const detail::MicroKernels& mk, const QuantMatrix& w) {
  return w.format() == WeightFormat::kInt4 && mk.qdot_tile_int4_q8 != nullptr;
}

// Tiles [t0, t1) of y = x·wᵀ (+ bias) for a quantised matrix; x rows are lda apart and hold
// w.groups()·kGroup values (zero beyond K). xq: the same rows quantised, when uses_q8.
void quant_tiles(const detail::MicroKernels& mk, const float* x, int64_t lda, const detail::QuantizedRows* xq,
                 int64_t M, const QuantMatrix& w, const float* bias, float* y, int64_t t0, int64_t t1) {
  const int64_t N = w.rows();
  const WeightFormat f = w.format();
  const int64_t groups = w.groups();
  const int64_t tile_codes = groups * kRowTile * detail::quant_code_bytes(f);
  const int64_t tile_scales = groups * kRowTile * detail::quant_scales(f);
  const int64_t x_tile = M == 1 ? 1 : detail::kTileMax;
  const int64_t tiles_per_block = std::max<int64_t>(1, kWeightBlockBytes / tile_codes);
  float out[detail::kTileMax * kRowTile];
  for (int64_t tb = t0; tb < t1; tb += tiles_per_block) {
    const int64_t tb_end = std::min(t1, tb + tiles_per_block);
    for (int64_t m = 0; m < M; m += x_tile) {
      const int mr = static_cast<int>(std::min(x_tile, M - m));
      for (int64_t t = tb; t < tb_end; ++t) {
        if (xq) {
          detail::QuantizedRows rows = *xq;
          rows.q += m * rows.ldq;
          rows.scale += m * rows.lds;
          rows.sum += m * rows.lds;
          mk.qdot_tile_int4_q8(mr, groups, rows, w.codes() + t * tile_codes, w.scales() + t * tile_scales, out);
        } else {
          mk.qdot_tile(f, mr, groups, x + m * lda, lda, w.codes() + t * tile_codes, w.scales() + t * tile_scales, out);
        }
        const int64_t n0 = t * kRowTile, nr = std::min<int64_t>(kRowTile, N - n0);
        for (int i = 0; i < mr; ++i)
          for (int64_t j = 0; j < nr; ++j)
            y[(m + i) * N + n0 + j] = bias ? out[i * kRowTile + j] + bias[n0 + j] : out[i * kRowTile + j];
      }
    }
  }
}

// x as the quantised kernels read it: rows of groups·kGroup values, zero-padded when K is not a
// multiple of the group (then copied into buf).
const float* padded_x(const float* x, int64_t M, int64_t K, int64_t padded, std::vector<float>& buf) {
  if (padded == K) return x;
  buf.assign(static_cast<size_t>(M * padded), 0.0f);
  for (int64_t m = 0; m < M; ++m) std::copy(x + m * K, x + (m + 1) * K, buf.data() + m * padded);
  return buf.data();
}

int64_t grain_for(int64_t M, int64_t K) { return std::max<int64_t>(1, detail::kMinParallelWork / (M * K * kRowTile)); }

}  // namespace

void linear(const float* x, int64_t M, const MatrixRef& w, const float* bias, float* y,
            ThreadPool* pool) {
  const int64_t N = w.rows, K = w.cols;
  if (M <= 0 || N <= 0 || K < 0 || !detail::is_weight_dtype(w.dtype)) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] = bias ? bias[n] : 0.0f;
    return;
  }
  const auto& mk = detail::active_kernels();
  detail::run_parallel(pool, tiles_of(N), grain_for(M, K),
                       [&](int64_t t0, int64_t t1) { dense_tiles(mk, x, M, w, bias, y, t0, t1); });
}

void linear(const float* x, int64_t M, const QuantMatrix& w, const float* bias, float* y, ThreadPool* pool) {
  const int64_t N = w.rows(), K = w.cols();
  if (M <= 0 || N <= 0 || K <= 0) return;
  const auto& mk = detail::active_kernels();
  const int64_t lda = w.groups() * QuantMatrix::kGroup;
  std::vector<float> buf;
  const float* xp = padded_x(x, M, K, lda, buf);
  detail::QuantizedRows xq;
  if (uses_q8(mk, w)) xq = quantize_rows(mk, xp, lda, M, w.groups());
  const detail::QuantizedRows* xqp = uses_q8(mk, w) ? &xq : nullptr;
  detail::run_parallel(pool, tiles_of(N), grain_for(M, K),
                       [&](int64_t t0, int64_t t1) { quant_tiles(mk, xp, lda, xqp, M, w, bias, y, t0, t1); });
}

void linear(const float* x, int64_t M, const LinearWeight& w, const float* bias, float* y, ThreadPool* pool) {
  if (w.quant().empty()) linear(x, M, MatrixRef::of(w.tensor()), bias, y, pool);
  else linear(x, M, w.quant(), bias, y, pool);
}

void linear_fused(const float* x, int64_t M, std::span<const LinearOutput> outs, ThreadPool* pool) {
  if (M <= 0 || outs.empty()) return;
  const int64_t K = outs[0].w->cols();
  std::vector<int64_t> first(outs.size() + 1, 0);  // first tile of each output in the joint range
  int64_t padded = K;
  const auto& mk = detail::active_kernels();
  bool q8 = false;
  for (size_t i = 0; i < outs.size(); ++i) {
    const LinearWeight& w = *outs[i].w;
    if (w.cols() != K || w.empty() || K <= 0) return;  // not one x: a caller bug, as in linear()
    if (!w.quant().empty()) {
      padded = w.quant().groups() * QuantMatrix::kGroup;
      q8 = q8 || uses_q8(mk, w.quant());
    }
    first[i + 1] = first[i] + tiles_of(w.rows());
  }
  std::vector<float> buf;
  const float* xp = padded_x(x, M, K, padded, buf);
  detail::QuantizedRows xq;
  if (q8) xq = quantize_rows(mk, xp, padded, M, padded / QuantMatrix::kGroup);
  detail::run_parallel(pool, first.back(), grain_for(M, K), [&](int64_t t0, int64_t t1) {
    for (size_t i = 0; i < outs.size(); ++i) {
      const int64_t b = std::max(t0, first[i]), e = std::min(t1, first[i + 1]);
      if (b >= e) continue;
      const LinearWeight& w = *outs[i].w;
      if (w.quant().empty())
        dense_tiles(mk, x, M, MatrixRef::of(w.tensor()), nullptr, outs[i].y, b - first[i], e - first[i]);
      else
        quant_tiles(mk, xp, padded, uses_q8(mk, w.quant()) ? &xq : nullptr, M, w.quant(), nullptr, outs[i].y,
                    b - first[i], e - first[i]);
    }
  });
}

Result<LinearWeight> LinearWeight::load(Tensor t, WeightFormat format, ThreadPool* pool) {
  if (t.rank() != 2 || !detail::is_weight_dtype(t.dtype()))
    return make_error(ErrorCode::kInvalidArgument, "linear weight: needs a rank-2 float tensor, got " +
                                                       shape_to_string(t.shape()) + " " + dtype_name(t.dtype()));
  LinearWeight w;
  w.rows_ = t.dim(0);
  w.cols_ = t.dim(1);
  if (format == WeightFormat::kBf16) {
    w.tensor_ = std::move(t);
  } else {
    CHORUS_ASSIGN(w.quant_, QuantMatrix::quantize(MatrixRef::of(t), format, pool));
  }
  return w;
}

void embedding(const MatrixRef& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.cols;
  if (n <= 0 || dim <= 0 || !detail::is_weight_dtype(table.dtype)) return;
  const int64_t es = static_cast<int64_t>(dtype_size(table.dtype));
  const auto* base = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < n; ++i) {
    float* dst = out + i * dim;
    if (ids[i] < 0 || ids[i] >= table.rows) {  // the caller checks ids; stay in bounds regardless
      std::fill(dst, dst + dim, 0.0f);
      continue;
    }
    convert_to_f32(table.dtype, base + ids[i] * dim * es, dst, static_cast<size_t>(dim));
  }
}

}  // namespace chorus::cpu
