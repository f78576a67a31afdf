#include "models/codec/conv_layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace chorus::codec::detail {

namespace {

// Streams with this many new columns on average are convolved one by one: their own columns
// already reuse each weight that often.
constexpr int64_t kBatchColumns = 32;

// Columns [at, at + n) of the rows of x [rows, N] -> out [rows, n], and back.
void take_columns(const float* x, int64_t rows, int64_t N, int64_t at, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out + r * n, x + r * N + at, sizeof(float) * n);
}
void put_columns(const float* in, int64_t rows, int64_t n, float* y, int64_t N, int64_t at) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * N + at, in + r * n, sizeof(float) * n);
}

}  // namespace

Segments Segments::of(std::span<const int64_t> counts) {
  Segments s;
  for (const int64_t c : counts) {
    s.at.push_back(s.total);
    s.n.push_back(c);
    s.total += c;
  }
  return s;
}

Segments Segments::scaled(int64_t rate) const {
  Segments s = *this;
  for (auto& v : s.n) v *= rate;
  for (auto& v : s.at) v *= rate;
  s.total *= rate;
  return s;
}

WeightMatrix WeightMatrix::of(const Tensor& t, int64_t rows, int64_t cols) {
  WeightMatrix m;
  m.keep = t;
  m.ref.dtype = t.dtype();
  m.ref.data = t.data();
  m.ref.rows = rows;
  m.ref.cols = cols;
  return m;
}

std::vector<float> f32_vector(const Weights& w, const std::string& name) {
  const Tensor t = w.f32(name);
  if (t.empty()) return {};
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

CausalConv1d CausalConv1d::load(const Weights& w, const std::string& name, int64_t cin,
                                int64_t cout, int64_t kernel, int64_t dilation, int64_t groups) {
  CausalConv1d c;
  c.cin = cin;
  c.cout = cout;
  c.kernel = kernel;
  c.dilation = dilation;
  c.groups = groups;
  c.weight = WeightMatrix::of(w.raw(name + ".weight"), cout, cin / groups * kernel);
  c.bias = f32_vector(w, name + ".bias");
  return c;
}

void CausalConv1d::forward(Buffer& hist, const float* x, int64_t n, float* y, Buffer& scratch,
                           ThreadPool* pool) const {
  const float* b = bias.empty() ? nullptr : bias.data();
  const int64_t H = history();
  if (H == 0) {
    cpu::conv1d(x, cin, n, weight.ref, kernel, b, 1, dilation, groups, y, pool);
    return;
  }
  // [history | new] per channel, so the kernel sees the causal left context of a full pass.
  const int64_t len = H + n;
  scratch.resize(static_cast<size_t>(cin * len));
  for (int64_t c = 0; c < cin; ++c) {
    float* row = scratch.data() + c * len;
    std::memcpy(row, hist.data() + c * H, sizeof(float) * H);
    std::memcpy(row + H, x + c * n, sizeof(float) * n);
  }
  cpu::conv1d(scratch.data(), cin, len, weight.ref, kernel, b, 1, dilation, groups, y, pool);
  for (int64_t c = 0; c < cin; ++c)
    std::memcpy(hist.data() + c * H, scratch.data() + c * len + n, sizeof(float) * H);
}

void CausalConv1d::forward_batch(std::span<Buffer* const> hists, const float* x, const Segments& seg,
                                 float* y, Buffer& scratch, SegmentScratch& more, ThreadPool* pool) const {
  const float* b = bias.empty() ? nullptr : bias.data();
  const int64_t H = history(), N = seg.total, S = static_cast<int64_t>(seg.size());
  if (S == 1) return forward(*hists[0], x, N, y, scratch, pool);
  if (H == 0) {  // k = 1: every output column from its own input column
    cpu::conv1d(x, cin, N, weight.ref, kernel, b, 1, dilation, groups, y, pool);
    return;
  }
  if (N >= kBatchColumns * S) {
    Buffer &in = more.in, &out = more.out, &pad = more.pad;
    for (int64_t i = 0; i < S; ++i) {
      in.resize(static_cast<size_t>(cin * seg.n[i]));
      out.resize(static_cast<size_t>(cout * seg.n[i]));
      take_columns(x, cin, N, seg.at[i], seg.n[i], in.data());
      forward(*hists[i], in.data(), seg.n[i], out.data(), pad, pool);
      put_columns(out.data(), cout, seg.n[i], y, N, seg.at[i]);
    }
    return;
  }
  // Row ci·K + k of the gathered input holds, for every stream, input ci shifted by k·dilation
  // over [history | new]: the rows forward() hands the kernel in place. As a k = 1 convolution of
  // cin·K channels (group-major, as the weight's columns) each output sums the same products in
  // the same order.
  scratch.resize(static_cast<size_t>(cin * kernel * N));
  Buffer& window = more.window;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t n = seg.n[i], at = seg.at[i];
    window.resize(static_cast<size_t>(H + n));
    Buffer& hist = *hists[i];
    for (int64_t c = 0; c < cin; ++c) {
      std::memcpy(window.data(), hist.data() + c * H, sizeof(float) * H);
      std::memcpy(window.data() + H, x + c * N + at, sizeof(float) * n);
      for (int64_t k = 0; k < kernel; ++k)
        std::memcpy(scratch.data() + (c * kernel + k) * N + at, window.data() + k * dilation, sizeof(float) * n);
      std::memcpy(hist.data() + c * H, window.data() + n, sizeof(float) * H);
    }
  }
  cpu::conv1d(scratch.data(), cin * kernel, N, weight.ref, 1, b, 1, 1, groups, y, pool);
}

CausalConvTranspose1d CausalConvTranspose1d::load(const Weights& w, const std::string& name,
                                                  int64_t cin, int64_t cout, int64_t kernel,
                                                  int64_t stride) {
  CausalConvTranspose1d c;
  c.cin = cin;
  c.cout = cout;
  c.kernel = kernel;
  c.stride = stride;
  c.weight = WeightMatrix::of(w.raw(name + ".weight"), cin, cout * kernel);
  c.bias = f32_vector(w, name + ".bias");
  return c;
}

TransposeHistory CausalConvTranspose1d::initial_history() const {
  TransposeHistory h;
  h.cols.assign(static_cast<size_t>(cin * lookback()), 0.0f);
  return h;
}

void CausalConvTranspose1d::forward(TransposeHistory& hist, const float* x, int64_t n, float* y,
                                    Buffer& scratch_in, Buffer& scratch_out,
                                    ThreadPool* pool) const {
  const float* b = bias.empty() ? nullptr : bias.data();
  const int64_t P = lookback(), have = hist.have, m = have + n;
  // Input: the `have` most recent past columns (kept right-aligned in hist.cols), then x.
  const float* in = x;
  if (have > 0) {
    scratch_in.resize(static_cast<size_t>(cin * m));
    for (int64_t c = 0; c < cin; ++c) {
      float* row = scratch_in.data() + c * m;
      std::memcpy(row, hist.cols.data() + c * P + (P - have), sizeof(float) * have);
      std::memcpy(row + have, x + c * n, sizeof(float) * n);
    }
    in = scratch_in.data();
  }
  // The kernel's output sample t·s + j sums bias, then input t' = t−P..t in ascending order, the
  // same order a full pass uses; the first have·s samples lack earlier inputs and are dropped, as
  // are the trailing K − s samples that would still receive input n (the official right trim).
  const int64_t full = (m - 1) * stride + kernel;
  scratch_out.resize(static_cast<size_t>(cout * full));
  cpu::conv_transpose1d(in, cin, m, weight.ref, cout, kernel, b, stride, 1, scratch_out.data(),
                        pool);
  const int64_t out_len = n * stride;
  for (int64_t c = 0; c < cout; ++c)
    std::memcpy(y + c * out_len, scratch_out.data() + c * full + have * stride,
                sizeof(float) * out_len);
  if (P == 0) return;
  // Keep the last min(P, m) input columns, right-aligned.
  const int64_t keep = std::min(P, m);
  for (int64_t c = 0; c < cin; ++c) {
    const float* src = (have > 0 ? scratch_in.data() + c * m : x + c * n) + (m - keep);
    std::memcpy(hist.cols.data() + c * P + (P - keep), src, sizeof(float) * keep);
  }
  hist.have = keep;
}

void CausalConvTranspose1d::forward_batch(std::span<TransposeHistory* const> hists, const float* x,
                                          const Segments& seg, float* y, Buffer& scratch_in, Buffer& scratch_out,
                                          SegmentScratch& more, ThreadPool* pool) const {
  const float* b = bias.empty() ? nullptr : bias.data();
  const int64_t P = lookback(), N = seg.total, S = static_cast<int64_t>(seg.size());
  if (S == 1) return forward(*hists[0], x, N, y, scratch_in, scratch_out, pool);
  if (P == 0) {  // K <= stride: each input column makes its own output columns, with no history
    const int64_t full = (N - 1) * stride + kernel, out_len = N * stride;
    scratch_out.resize(static_cast<size_t>(cout * full));
    cpu::conv_transpose1d(x, cin, N, weight.ref, cout, kernel, b, stride, 1, scratch_out.data(), pool);
    for (int64_t c = 0; c < cout; ++c)
      std::memcpy(y + c * out_len, scratch_out.data() + c * full, sizeof(float) * out_len);
    return;
  }
  bool full_history = true;
  for (int64_t i = 0; i < S; ++i) full_history = full_history && hists[i]->have == P;
  if (!full_history || N >= kBatchColumns * S) {
    Buffer &in = more.in, &out = more.out, &pad_in = more.pad, &pad_out = more.pad_out;
    for (int64_t i = 0; i < S; ++i) {
      in.resize(static_cast<size_t>(cin * seg.n[i]));
      out.resize(static_cast<size_t>(cout * seg.n[i] * stride));
      take_columns(x, cin, N, seg.at[i], seg.n[i], in.data());
      forward(*hists[i], in.data(), seg.n[i], out.data(), pad_in, pad_out, pool);
      put_columns(out.data(), cout, seg.n[i] * stride, y, N * stride, seg.at[i] * stride);
    }
    return;
  }
  // Stream i's P history columns then its new ones, streams side by side. An output sample of a
  // stream's new columns sums the bias and inputs t − P..t in ascending order, all of its own
  // stream (its history is full), as forward() sums them; the samples of the history columns,
  // which the neighbour's last inputs reach, are dropped as forward() drops them.
  const int64_t M = N + P * S;
  scratch_in.resize(static_cast<size_t>(cin * M));
  for (int64_t i = 0; i < S; ++i) {
    const int64_t start = seg.at[i] + P * i;
    for (int64_t c = 0; c < cin; ++c) {
      float* row = scratch_in.data() + c * M + start;
      std::memcpy(row, hists[i]->cols.data() + c * P, sizeof(float) * P);
      std::memcpy(row + P, x + c * N + seg.at[i], sizeof(float) * seg.n[i]);
      std::memcpy(hists[i]->cols.data() + c * P, row + seg.n[i], sizeof(float) * P);
    }
  }
  const int64_t full = (M - 1) * stride + kernel, out_len = N * stride;
  scratch_out.resize(static_cast<size_t>(cout * full));
  cpu::conv_transpose1d(scratch_in.data(), cin, M, weight.ref, cout, kernel, b, stride, 1, scratch_out.data(), pool);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t from = (seg.at[i] + P * i + P) * stride;
    for (int64_t c = 0; c < cout; ++c)
      std::memcpy(y + c * out_len + seg.at[i] * stride, scratch_out.data() + c * full + from,
                  sizeof(float) * seg.n[i] * stride);
  }
}

SnakeBeta SnakeBeta::load(const Weights& w, const std::string& name) {
  SnakeBeta s;
  s.alpha = f32_vector(w, name + ".alpha");
  s.inv_beta = f32_vector(w, name + ".beta");
  for (float& a : s.alpha) a = std::exp(a);
  for (float& b : s.inv_beta) b = 1.0f / (std::exp(b) + 1e-9f);
  return s;
}

void SnakeBeta::apply(const float* x, int64_t n, float* y, ThreadPool* pool) const {
  const int64_t channels = static_cast<int64_t>(alpha.size());
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) cpu::snake_beta(x + c * n, n, alpha[c], inv_beta[c], y + c * n);
  };
  constexpr int64_t kMinPerTask = 32768;
  if (pool && pool->size() > 1 && channels * n >= 2 * kMinPerTask) {
    pool->parallel_for(channels, run, std::max<int64_t>(1, kMinPerTask / std::max<int64_t>(1, n)));
  } else {
    run(0, channels);
  }
}

void transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t kBlock = 32;  // cache-friendly tiles
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
    }
}

}  // namespace chorus::codec::detail
