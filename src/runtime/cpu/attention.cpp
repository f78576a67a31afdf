// Causal grouped-query attention over a KV cache, one (query, head) pair per task:
// scores = scale · q·kⱼ over the visible keys, softmax in f32, out = Σ pⱼ vⱼ.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"

namespace chorus::cpu {

namespace {

struct AttnScratch {
  std::vector<float> p;               // scores, then probabilities
  std::vector<const float*> v_rows;   // the visible value rows
};

// One query row against keys [lo, hi] of one kv head.
void attend_one(const detail::MicroKernels& mk, const float* q, const float* k, const float* v,
                int64_t kv_stride, int64_t D, int64_t lo, int64_t hi, float scale, float* out,
                AttnScratch& s) {
  const int64_t n = hi - lo + 1;
  s.p.resize(static_cast<size_t>(n));
  s.v_rows.resize(static_cast<size_t>(n));
  float* p = s.p.data();
  constexpr int64_t kTile = detail::kTileMax;
  for (int64_t j = 0; j < n; j += kTile) {
    const int nr = static_cast<int>(std::min(kTile, n - j));
    mk.dot_tile(1, nr, D, q, D, DType::kF32, k + (lo + j) * kv_stride, kv_stride, p + j);
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    p[j] *= scale;
    mx = std::max(mx, p[j]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(p[j] - mx);
    sum += p[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) {
    p[j] *= inv;
    s.v_rows[static_cast<size_t>(j)] = v + (lo + j) * kv_stride;
  }
  mk.axpy_panel(1, D, n, p, 0, 1, s.v_rows.data(), 0, nullptr, out, D);
}

}  // namespace

void attention(const float* q, int64_t Tq, int64_t Hq, const float* k, const float* v, int64_t Tk,
               int64_t Hkv, int64_t D, int64_t q_pos0, int64_t window, float scale, float* out,
               ThreadPool* pool) {
  if (Tq <= 0 || Hq <= 0 || Hkv <= 0 || D <= 0 || Hq % Hkv != 0 || q_pos0 < 0 || Tk < 0) return;
  const auto& mk = detail::active_kernels();
  const int64_t group = Hq / Hkv, kv_stride = Hkv * D;
  const int64_t tasks = Tq * Hq;
  const int64_t work_per_task = 2 * D * std::max<int64_t>(1, std::min(Tk, q_pos0 + Tq));
  const int64_t grain = std::max<int64_t>(1, detail::kMinParallelWork / work_per_task);

  detail::run_parallel(pool, tasks, grain, [&](int64_t t0, int64_t t1) {
    AttnScratch scratch;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / Hq, h = t % Hq, kvh = h / group;
      const int64_t pos = q_pos0 + i;
      const int64_t hi = std::min(pos, Tk - 1);
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      float* o = out + (i * Hq + h) * D;
      if (hi < lo) {  // no visible key
        std::fill(o, o + D, 0.0f);
        continue;
      }
      attend_one(mk, q + (i * Hq + h) * D, k + kvh * D, v + kvh * D, kv_stride, D, lo, hi, scale,
                 o, scratch);
    }
  });
}

}  // namespace chorus::cpu
