#include "models/codec/upsample.h"

namespace chorus::codec::detail {

UpsampleStage UpsampleStage::load(const Weights& w, int64_t channels, int64_t ratio) {
  UpsampleStage s;
  s.channels_ = channels;
  s.up_ = CausalConvTranspose1d::load(w, "0.conv", channels, channels, ratio, ratio);
  s.dwconv_ = CausalConv1d::load(w, "1.dwconv.conv", channels, channels, 7, 1, channels);
  s.norm_w_ = f32_vector(w, "1.norm.weight");
  s.norm_b_ = f32_vector(w, "1.norm.bias");
  s.pw1_ = WeightMatrix::of(w.raw("1.pwconv1.weight"), 4 * channels, channels);
  s.pw1_b_ = f32_vector(w, "1.pwconv1.bias");
  s.pw2_ = WeightMatrix::of(w.raw("1.pwconv2.weight"), channels, 4 * channels);
  s.pw2_b_ = f32_vector(w, "1.pwconv2.bias");
  s.gamma_ = f32_vector(w, "1.gamma");
  return s;
}

void UpsampleStage::forward(UpsampleState& s, const float* x, int64_t n, float* upsampled, float* y,
                            UpsampleScratch& sc, ThreadPool* pool) const {
  UpsampleState* states[] = {&s};
  const int64_t counts[] = {n};
  forward_batch(states, x, Segments::of(counts), upsampled, y, sc, pool);
}

void UpsampleStage::forward_batch(std::span<UpsampleState* const> states, const float* x, const Segments& seg,
                                  float* upsampled, float* y, UpsampleScratch& sc, ThreadPool* pool) const {
  const Segments up = seg.scaled(up_.stride);
  const int64_t C = channels_, m = up.total;
  std::vector<TransposeHistory*> up_hist;
  std::vector<Buffer*> dw_hist;
  for (UpsampleState* s : states) {
    up_hist.push_back(&s->up);
    dw_hist.push_back(&s->dw_hist);
  }
  up_.forward_batch(up_hist, x, seg, upsampled, sc.a, sc.b, sc.segments, pool);
  sc.a.resize(static_cast<size_t>(C * m));
  dwconv_.forward_batch(dw_hist, upsampled, up, sc.a.data(), sc.b, sc.segments, pool);
  // Channel mixing runs time-major: [m, C] rows, each row on its own.
  sc.rows.resize(static_cast<size_t>(m * C));
  transpose(sc.a.data(), C, m, sc.rows.data());
  cpu::layer_norm(sc.rows.data(), norm_w_.data(), norm_b_.data(), sc.rows.data(), m, C, 1e-6f);
  sc.wide.resize(static_cast<size_t>(m * 4 * C));
  cpu::linear(sc.rows.data(), m, pw1_.ref, pw1_b_.data(), sc.wide.data(), pool);
  cpu::gelu_erf(sc.wide.data(), m * 4 * C);
  cpu::linear(sc.wide.data(), m, pw2_.ref, pw2_b_.data(), sc.rows.data(), pool);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < C; ++c) sc.rows[t * C + c] *= gamma_[c];
  transpose(sc.rows.data(), m, C, sc.a.data());
  for (int64_t i = 0; i < C * m; ++i) y[i] = upsampled[i] + sc.a[i];
}

}  // namespace chorus::codec::detail
