// linear (y = x·Wᵀ + b) and embedding gather.
#include <algorithm>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"

namespace chorus::cpu {

namespace {
constexpr int64_t kRowTile = 4;  // W rows per dot tile (= kTileMax)
constexpr int64_t kXRowTile = 3;  // x rows per dot tile when M > 1
// For M > 1, W is walked in blocks of about this many bytes that stay in L2 while every x row
// passes over them, so W is read from memory once instead of once per x tile.
constexpr int64_t kWeightBlockBytes = 256 * 1024;
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
  const int64_t es = static_cast<int64_t>(dtype_size(w.dtype));
  const auto* wb = static_cast<const uint8_t*>(w.data);
  const int64_t x_tile = M == 1 ? 1 : kXRowTile;
  const int64_t rows_per_block =
      std::max<int64_t>(kRowTile, kWeightBlockBytes / (K * es) / kRowTile * kRowTile);
  const int64_t tiles = (N + kRowTile - 1) / kRowTile;
  const int64_t grain = std::max<int64_t>(1, detail::kMinParallelWork / (M * K * kRowTile));

  detail::run_parallel(pool, tiles, grain, [&](int64_t t0, int64_t t1) {
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
  });
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
