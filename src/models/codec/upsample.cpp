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
  const int64_t C = channels_, m = n * up_.stride;
  up_.forward(s.up, x, n, upsampled, sc.a, sc.b, pool);
  sc.a.resize(static_cast<size_t>(C * m));
  dwconv_.forward(s.dw_hist, upsampled, m, sc.a.data(), sc.b, pool);
  // Channel mixing runs time-major: [m, C] rows.
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
