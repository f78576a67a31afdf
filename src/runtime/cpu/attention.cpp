// Causal grouped-query attention over a KV cache. A task is one query position and one kv head
// with the q heads that share it (up to kTileMax at a time), so each key and value row is read
// once for the whole group: scores = scale · q·kⱼ over the visible keys, softmax in f32,
// out = Σ pⱼ vⱼ.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"

namespace chorus::cpu {

namespace {

constexpr int64_t kTile = detail::kTileMax;

struct AttnScratch {
  std::vector<float> p;               // [heads, n] scores, then probabilities
  std::vector<const float*> v_rows;   // the visible value rows
};

// Key and value rows of one head lie kv_stride floats apart (4 KB for 8 heads of 128), a pattern
// the hardware prefetcher follows poorly; decode attention is bound by fetching them.
constexpr int64_t kPrefetchAhead = 2 * kTile;

void prefetch_rows(const float* base, int64_t stride, int64_t D, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t d = 0; d < D; d += 16) __builtin_prefetch(base + r * stride + d, 0, 3);
}

// `heads` (<= kTile) consecutive query rows against keys [lo, hi] of one kv head.
void attend_group(const detail::MicroKernels& mk, int heads, const float* q, const float* k,
                  const float* v, int64_t kv_stride, int64_t D, int64_t lo, int64_t hi,
                  float scale, float* out, AttnScratch& s) {
  const int64_t n = hi - lo + 1;
  s.p.resize(static_cast<size_t>(heads * n));
  s.v_rows.resize(static_cast<size_t>(n));
  float* p = s.p.data();
  float tile[kTile * kTile];
  for (int64_t j = 0; j < n; j += kTile) {
    const int nr = static_cast<int>(std::min(kTile, n - j));
    prefetch_rows(k, kv_stride, D, lo + j + kPrefetchAhead, std::min(hi + 1, lo + j + kPrefetchAhead + kTile));
    prefetch_rows(v, kv_stride, D, lo + j, lo + j + nr);
    mk.dot_tile(heads, nr, D, q, D, DType::kF32, k + (lo + j) * kv_stride, kv_stride, nullptr,
                tile);
    for (int h = 0; h < heads; ++h)
      for (int c = 0; c < nr; ++c) p[h * n + j + c] = tile[h * nr + c];
  }
  for (int h = 0; h < heads; ++h) {
    float* ph = p + h * n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      ph[j] *= scale;
      mx = std::max(mx, ph[j]);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      ph[j] = std::exp(ph[j] - mx);
      sum += ph[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) ph[j] *= inv;
  }
  for (int64_t j = 0; j < n; ++j) s.v_rows[static_cast<size_t>(j)] = v + (lo + j) * kv_stride;
  mk.axpy_panel(heads, D, n, p, n, 1, s.v_rows.data(), 0, nullptr, out, D, false);
}

}  // namespace

void attention(const float* q, int64_t Tq, int64_t Hq, const float* k, const float* v, int64_t Tk,
               int64_t Hkv, int64_t D, int64_t q_pos0, int64_t window, float scale, float* out,
               ThreadPool* pool) {
  if (Tq <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || Hq % Hkv != 0 || q_pos0 < 0 || Tk < 0) return;
  const auto& mk = detail::active_kernels();
  const int64_t group = Hq / Hkv, kv_stride = Hkv * D;
  const int64_t tasks = Tq * Hkv;
  const int64_t work_per_task = 2 * group * D * std::max<int64_t>(1, std::min(Tk, q_pos0 + Tq));
  const int64_t grain = std::max<int64_t>(1, detail::kMinParallelWork / work_per_task);

  detail::run_parallel(pool, tasks, grain, [&](int64_t t0, int64_t t1) {
    AttnScratch scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / Hkv, kvh = t % Hkv;
      const int64_t pos = q_pos0 + i;
      const int64_t hi = std::min(pos, Tk - 1);
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      for (int64_t h0 = kvh * group; h0 < (kvh + 1) * group; h0 += kTile) {
        const int heads = static_cast<int>(std::min(kTile, (kvh + 1) * group - h0));
        const int64_t row = (i * Hq + h0) * D;
        if (hi < lo) {  // no visible key
          std::fill(out + row, out + row + heads * D, 0.0f);
          continue;
        }
        attend_group(mk, heads, q + row, k + kvh * D, v + kvh * D, kv_stride, D, lo, hi, scale,
                     out + row, scratch);
      }
    }
  });
}

}  // namespace chorus::cpu
