// 1-D convolution and transposed convolution, both as "axpy panels": every output row is an
// initial value plus a sequence of scalar × row products in a fixed order.
//   conv1d:            y[co, t] = bias[co] + Σ_(ci,k) w[co, ci·K + k] · x[ci, t·stride + k·dilation]
//                      (stride 1 reads x rows in place; other strides gather them first).
//   conv_transpose1d:  z[t, co·K + k] = Σ_ci x[ci, t] · w[ci, co·K + k], then
//                      y[co, t·stride + k] += z[t, co·K + k] for t ascending.
#include <algorithm>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"
#include "runtime/cpu/parallel.h"

namespace chorus::cpu {

namespace {

constexpr int64_t kTile = detail::kTileMax;
constexpr int64_t kConvRowsPerTask = 32;   // output channels per conv1d task
constexpr int64_t kConvColsPerTask = 128;  // output samples per conv1d task
// A task walks the depth (cin·K) in panels of this many input rows, each panel's rows × the task's
// samples (64 KB at 128 × 128) staying in cache while every output channel of the task takes
// them; the sums carry from panel to panel (axpy_panel's resume), so each output keeps its order.
constexpr int64_t kConvDepthPanel = 128;
constexpr int64_t kTransposeCols = 128;    // z columns (co·K + k) per transposed-conv task
constexpr int64_t kTransposeRows = 64;     // input samples per z block

struct F32Rows {
  const float* data;
  int64_t stride;  // elements between rows
};

// Block [row0, row0 + rows) × [col0, col0 + cols) of w as f32: w itself when it is f32, else a
// converted copy in buf.
F32Rows block_as_f32(const MatrixRef& w, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                     std::vector<float>& buf) {
  if (w.dtype == DType::kF32)
    return {static_cast<const float*>(w.data) + row0 * w.cols + col0, w.cols};
  const int64_t es = static_cast<int64_t>(dtype_size(w.dtype));
  const auto* base = static_cast<const uint8_t*>(w.data);
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    convert_to_f32(w.dtype, base + ((row0 + r) * w.cols + col0) * es, buf.data() + r * cols,
                   static_cast<size_t>(cols));
  return {buf.data(), cols};
}

}  // namespace

void conv1d(const float* x, int64_t Cin, int64_t T, const MatrixRef& weight, int64_t K,
            const float* bias, int64_t stride, int64_t dilation, int64_t groups, float* y,
            ThreadPool* pool) {
  if (Cin <= 0 || T <= 0 || K <= 0 || stride <= 0 || dilation <= 0 || groups <= 0) return;
  const int64_t Cout = weight.rows;
  if (Cin % groups != 0 || Cout <= 0 || Cout % groups != 0) return;
  const int64_t cin_g = Cin / groups, cout_g = Cout / groups, R = cin_g * K;
  if (weight.cols != R || !detail::is_weight_dtype(weight.dtype)) return;
  const int64_t span = dilation * (K - 1) + 1;
  if (T < span) return;
  const int64_t Tout = (T - span) / stride + 1;

  const auto& mk = detail::active_kernels();
  const int64_t row_blocks = (cout_g + kConvRowsPerTask - 1) / kConvRowsPerTask;
  const int64_t col_blocks = (Tout + kConvColsPerTask - 1) / kConvColsPerTask;
  const int64_t tasks = groups * row_blocks * col_blocks;
  const int64_t work_per_task = std::min(kConvRowsPerTask, cout_g) * R *
                                std::min(kConvColsPerTask, Tout);
  const int64_t grain = std::max<int64_t>(1, detail::kMinParallelWork / work_per_task);

  detail::run_parallel(pool, tasks, grain, [&](int64_t t_begin, int64_t t_end) {
    std::vector<float> wbuf, cols;
    std::vector<const float*> rows(static_cast<size_t>(R));
    for (int64_t task = t_begin; task < t_end; ++task) {
      const int64_t g = task / (row_blocks * col_blocks);
      const int64_t rb = task / col_blocks % row_blocks, cb = task % col_blocks;
      const int64_t co0 = g * cout_g + rb * kConvRowsPerTask;
      const int64_t nco = std::min(kConvRowsPerTask, (g + 1) * cout_g - co0);
      const int64_t t0 = cb * kConvColsPerTask, nt = std::min(kConvColsPerTask, Tout - t0);
      const float* xg = x + g * cin_g * T;
      int64_t col0 = 0;
      if (stride == 1) {  // the shifted input rows are the panel rows
        for (int64_t ci = 0; ci < cin_g; ++ci)
          for (int64_t k = 0; k < K; ++k) rows[ci * K + k] = xg + ci * T + k * dilation;
        col0 = t0;
      } else {
        cols.resize(static_cast<size_t>(R * nt));
        for (int64_t ci = 0; ci < cin_g; ++ci)
          for (int64_t k = 0; k < K; ++k) {
            float* dst = cols.data() + (ci * K + k) * nt;
            const float* src = xg + ci * T + k * dilation + t0 * stride;
            for (int64_t t = 0; t < nt; ++t) dst[t] = src[t * stride];
            rows[ci * K + k] = dst;
          }
      }
      const F32Rows wf = block_as_f32(weight, co0, nco, 0, R, wbuf);
      for (int64_t r0 = 0; r0 < R; r0 += kConvDepthPanel) {
        const int64_t nr = std::min(kConvDepthPanel, R - r0);
        for (int64_t m = 0; m < nco; m += kTile) {
          const int mr = static_cast<int>(std::min(kTile, nco - m));
          mk.axpy_panel(mr, nt, nr, wf.data + m * wf.stride + r0, wf.stride, 1, rows.data() + r0, col0,
                        bias ? bias + co0 + m : nullptr, y + (co0 + m) * Tout + t0, Tout, r0 > 0);
        }
      }
    }
  });
}

void conv_transpose1d(const float* x, int64_t Cin, int64_t T, const MatrixRef& weight,
                      int64_t Cout, int64_t K, const float* bias, int64_t stride, int64_t groups,
                      float* y, ThreadPool* pool) {
  if (Cin <= 0 || T <= 0 || K <= 0 || stride <= 0 || groups <= 0 || Cout <= 0) return;
  if (Cin % groups != 0 || Cout % groups != 0 || weight.rows != Cin) return;
  const int64_t cin_g = Cin / groups, cout_g = Cout / groups;
  if (weight.cols != cout_g * K || !detail::is_weight_dtype(weight.dtype)) return;
  const int64_t Tout = (T - 1) * stride + K;

  const auto& mk = detail::active_kernels();
  // A task owns `ch` whole output channels of one group: it converts their weight columns,
  // then sweeps all input samples, so each y element is summed by one task in t order.
  const int64_t ch = std::clamp<int64_t>(kTransposeCols / K, 1, cout_g);
  const int64_t blocks = (cout_g + ch - 1) / ch;
  const int64_t tasks = groups * blocks;
  const int64_t grain =
      std::max<int64_t>(1, detail::kMinParallelWork / std::max<int64_t>(1, cin_g * ch * K * T));

  detail::run_parallel(pool, tasks, grain, [&](int64_t t_begin, int64_t t_end) {
    std::vector<float> wbuf, z;
    std::vector<const float*> rows(static_cast<size_t>(cin_g));
    for (int64_t task = t_begin; task < t_end; ++task) {
      const int64_t g = task / blocks, b = task % blocks;
      const int64_t co_local = b * ch, nco = std::min(ch, cout_g - co_local);
      const int64_t co0 = g * cout_g + co_local, ncols = nco * K;
      const F32Rows wf = block_as_f32(weight, g * cin_g, cin_g, co_local * K, ncols, wbuf);
      for (int64_t ci = 0; ci < cin_g; ++ci) rows[ci] = wf.data + ci * wf.stride;
      for (int64_t co = 0; co < nco; ++co) {
        float* yr = y + (co0 + co) * Tout;
        std::fill(yr, yr + Tout, bias ? bias[co0 + co] : 0.0f);
      }
      const float* xg = x + g * cin_g * T;
      z.resize(static_cast<size_t>(kTransposeRows * ncols));
      for (int64_t t0 = 0; t0 < T; t0 += kTransposeRows) {
        const int64_t nt = std::min(kTransposeRows, T - t0);
        for (int64_t t = 0; t < nt; t += kTile) {
          const int mr = static_cast<int>(std::min(kTile, nt - t));
          mk.axpy_panel(mr, ncols, cin_g, xg + t0 + t, 1, T, rows.data(), 0, nullptr,
                        z.data() + t * ncols, ncols, false);
        }
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t co = 0; co < nco; ++co) {
            float* yr = y + (co0 + co) * Tout + (t0 + t) * stride;
            const float* zr = z.data() + t * ncols + co * K;
            for (int64_t k = 0; k < K; ++k) yr[k] += zr[k];
          }
      }
    }
  });
}

}  // namespace chorus::cpu
