#include "models/codec/seanet_encoder.h"

#include <algorithm>
#include <cstring>

namespace chorus::codec::detail {

MimiCausalConv MimiCausalConv::load(const Weights& w, const std::string& name, int64_t cin,
                                    int64_t cout, int64_t kernel, int64_t stride, int64_t dilation) {
  MimiCausalConv c;
  c.cin = cin;
  c.cout = cout;
  c.kernel = kernel;
  c.stride = stride;
  c.dilation = dilation;
  c.weight = WeightMatrix::of(w.raw(name + ".weight"), cout, cin * kernel);
  c.bias = f32_vector(w, name + ".bias");
  return c;
}

void MimiCausalConv::forward(std::vector<float>& hist, const float* x, int64_t n, bool last, float* y,
                             std::vector<float>& scratch, ThreadPool* pool) const {
  const int64_t out = outputs(n, last);
  if (out == 0) return;
  const int64_t P = history(), extra = out * stride - n, len = P + n + extra;
  // [history | x | zeros up to a whole stride] per channel: the causal left context of a full pass
  // and, at the very end, Mimi's extra right padding.
  scratch.assign(static_cast<size_t>(cin * len), 0.0f);
  for (int64_t c = 0; c < cin; ++c) {
    float* row = scratch.data() + c * len;
    if (P > 0) std::memcpy(row, hist.data() + c * P, sizeof(float) * P);
    std::memcpy(row + P, x + c * n, sizeof(float) * n);
  }
  cpu::conv1d(scratch.data(), cin, len, weight.ref, kernel, bias.empty() ? nullptr : bias.data(), stride,
              dilation, 1, y, pool);
  if (last || P == 0) return;
  for (int64_t c = 0; c < cin; ++c)  // the last P columns of [history | x]
    std::memcpy(hist.data() + c * P, scratch.data() + c * len + n, sizeof(float) * P);
}

SeanetEncoder SeanetEncoder::load(const Weights& w, const EncoderConfig& e) {
  SeanetEncoder s;
  const Weights l = w.sub("encoder.layers.");
  auto name = [](int64_t idx) { return std::to_string(idx); };
  int64_t idx = 0, ch = e.num_filters;
  s.first_ = MimiCausalConv::load(l, name(idx++) + ".conv", 1, ch, e.kernel_size);
  for (auto it = e.upsampling_ratios.rbegin(); it != e.upsampling_ratios.rend(); ++it) {
    Stage st;
    int64_t dilation = 1;
    for (int64_t r = 0; r < e.num_residual_layers; ++r) {
      const std::string b = name(idx++) + ".block.";
      st.residual.emplace_back(
          MimiCausalConv::load(l, b + "1.conv", ch, ch / e.compress, e.residual_kernel_size, 1, dilation),
          MimiCausalConv::load(l, b + "3.conv", ch / e.compress, ch, 1));
      dilation *= e.dilation_growth_rate;
    }
    ++idx;  // ELU
    st.down = MimiCausalConv::load(l, name(idx++) + ".conv", ch, 2 * ch, 2 * *it, *it);
    s.hop_ *= *it;
    ch *= 2;
    s.stages_.push_back(std::move(st));
  }
  ++idx;  // ELU
  s.last_ = MimiCausalConv::load(l, name(idx++) + ".conv", ch, e.hidden_size, e.last_kernel_size);
  s.out_channels_ = e.hidden_size;
  return s;
}

SeanetState SeanetEncoder::new_state() const {
  SeanetState st;
  auto add = [&](const MimiCausalConv& c) { st.hist.emplace_back(static_cast<size_t>(c.cin * c.history()), 0.0f); };
  add(first_);
  for (const auto& stage : stages_) {
    for (const auto& [a, b] : stage.residual) {
      add(a);
      add(b);
    }
    add(stage.down);
  }
  add(last_);
  return st;
}

void SeanetEncoder::forward(SeanetState& s, const float* samples, int64_t n, bool last,
                            std::vector<float>& out, ThreadPool* pool) const {
  size_t h = 0;  // index of the next conv's history
  auto run = [&](const MimiCausalConv& conv, const float* x, int64_t len, std::vector<float>& y) {
    y.resize(static_cast<size_t>(conv.cout * conv.outputs(len, last)));
    conv.forward(s.hist[h++], x, len, last, y.data(), s.scratch, pool);
    return conv.outputs(len, last);
  };
  int64_t len = run(first_, samples, n, s.a);
  int64_t ch = first_.cout;
  for (const auto& stage : stages_) {
    for (const auto& [c1, c2] : stage.residual) {
      s.b.assign(s.a.begin(), s.a.begin() + ch * len);  // the block sees ELU(x); the skip keeps x
      cpu::elu(s.b.data(), ch * len);
      run(c1, s.b.data(), len, s.c);
      cpu::elu(s.c.data(), c1.cout * len);
      run(c2, s.c.data(), len, s.b);
      for (int64_t i = 0; i < ch * len; ++i) s.a[i] += s.b[i];
    }
    cpu::elu(s.a.data(), ch * len);
    len = run(stage.down, s.a.data(), len, s.b);
    ch = stage.down.cout;
    std::swap(s.a, s.b);
  }
  cpu::elu(s.a.data(), ch * len);
  run(last_, s.a.data(), len, s.b);
  const size_t base = out.size();
  out.resize(base + static_cast<size_t>(out_channels_ * len));
  transpose(s.b.data(), out_channels_, len, out.data() + base);  // [C, len] -> [len, C]
}

}  // namespace chorus::codec::detail
