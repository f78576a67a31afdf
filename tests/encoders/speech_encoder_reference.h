// Naive f64 speech encoder (see speech_encoder_reference_test.cpp): every stage as plain loops over
// the checkpoint's weights, following qwen3_tts.md §4.3 and Mimi's padding rules.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/qwen3_tts/checkpoint.h"
#include "io/weight_table.h"

namespace chorus::test {

struct ReferenceEncoding {
  // Same names and layouts as the goldens: seanet [H, T], transformer [T, H], downsample [H, F].
  std::map<std::string, std::vector<double>> stages;
  std::vector<int32_t> codes;  // [F, 16]
  // Per decision: the gap between the second-best and the best squared distance.
  std::vector<double> margins;
};

namespace ref_detail {

using Mat = std::vector<std::vector<double>>;  // [channels][time]

inline std::vector<double> vec(const Weights& w, const std::string& name) {
  const Tensor t = w.f32(name);
  return std::vector<double>(t.f32(), t.f32() + t.numel());
}

// Mimi causal conv: left padding k_eff − s, right padding to a whole number of strides; `replicate`
// repeats the edge columns instead of zeros.
inline Mat conv(const Mat& x, const Weights& w, const std::string& name, int64_t cout, int64_t k, int64_t s, int64_t d,
                bool replicate = false, bool bias = true) {
  const std::vector<double> W = vec(w, name + ".weight");
  const std::vector<double> b = bias ? vec(w, name + ".bias") : std::vector<double>(cout, 0.0);
  const int64_t cin = static_cast<int64_t>(x.size()), L = static_cast<int64_t>(x[0].size());
  const int64_t keff = (k - 1) * d + 1, left = keff - s, out = (L + s - 1) / s;
  Mat y(cout, std::vector<double>(out));
  auto at = [&](int64_t c, int64_t p) -> double {
    if (p < 0) return replicate ? x[c][0] : 0.0;
    if (p >= L) return replicate ? x[c][L - 1] : 0.0;
    return x[c][p];
  };
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t t = 0; t < out; ++t) {
      double acc = b[o];
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t j = 0; j < k; ++j) acc += W[(o * cin + c) * k + j] * at(c, t * s + j * d - left);
      y[o][t] = acc;
    }
  return y;
}

inline void elu(Mat& x) {
  for (auto& r : x)
    for (double& v : r) v = v > 0 ? v : std::expm1(v);
}

inline std::vector<double> layer_norm(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, double eps) {
  double m = 0, v = 0;
  for (double a : x) m += a;
  m /= static_cast<double>(x.size());
  for (double a : x) v += (a - m) * (a - m);
  v /= static_cast<double>(x.size());
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - m) / std::sqrt(v + eps) * w[i] + b[i];
  return y;
}

inline std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& W, int64_t out) {
  const int64_t in = static_cast<int64_t>(x.size());
  std::vector<double> y(out, 0.0);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[o] += W[o * in + i] * x[i];
  return y;
}

}  // namespace ref_detail

// Split-RVQ encode of downsample [H, F] in f64. With `follow`, the residual walks along those codes
// (e.g. the official ones) instead of its own choices, and `distances` receives, per decision, the
// exact squared distance to every codebook vector. Returns the exact-arithmetic choices.
struct RvqDistances {
  std::vector<std::vector<double>> d;       // [F·keep][codebook_size]
  std::vector<std::vector<double>> vectors;  // per kept codebook: [codebook_size · dim]
  int64_t dim = 0;
  std::vector<double> proj_inf_norm;         // per group: max row abs-sum of its input projection
};

inline std::vector<int32_t> rvq_walk(const qwen3_tts::ModelFiles& files, const std::vector<double>& down, int64_t F,
                                     const std::vector<int32_t>* follow, std::vector<double>* margins,
                                     RvqDistances* distances = nullptr) {
  using namespace ref_detail;
  const auto& c = files.config.codec;
  const auto& e = c.encoder;
  const Weights w(files.codec, "encoder.");
  const int64_t H = e.hidden_size, keep = c.encoder_valid_num_quantizers, cd = e.codebook_dim;
  std::vector<int32_t> codes(static_cast<size_t>(F * keep), 0);
  if (margins) margins->assign(static_cast<size_t>(F * keep), 0.0);
  if (distances) {
    distances->d.assign(static_cast<size_t>(F * keep), {});
    distances->vectors.assign(static_cast<size_t>(keep), {});
    distances->dim = cd;
  }
  for (int group = 0; group < 2; ++group) {
    const std::string name = group == 0 ? "semantic_residual_vector_quantizer." : "acoustic_residual_vector_quantizer.";
    const Weights qw = w.sub("quantizer." + name);
    const auto P = vec(qw, "input_proj.weight");
    if (distances) {
      double norm = 0;
      for (int64_t o = 0; o < cd; ++o) {
        double s = 0;
        for (int64_t i = 0; i < H; ++i) s += std::fabs(P[o * H + i]);
        norm = std::max(norm, s);
      }
      distances->proj_inf_norm.push_back(norm);
    }
    const int64_t first = group == 0 ? 0 : e.num_semantic_quantizers;
    const int64_t count = group == 0 ? e.num_semantic_quantizers : keep - e.num_semantic_quantizers;
    std::vector<std::vector<double>> tables;
    for (int64_t i = 0; i < count; ++i) {
      const std::string cb = "layers." + std::to_string(i) + ".codebook.";
      const auto sum = vec(qw, cb + "embed_sum"), usage = vec(qw, cb + "cluster_usage");
      std::vector<double> tab(sum.size());
      for (int64_t r = 0; r < e.codebook_size; ++r)
        for (int64_t j = 0; j < cd; ++j) tab[r * cd + j] = sum[r * cd + j] / std::max(usage[r], 1e-5);
      if (distances) distances->vectors[first + i] = tab;
      tables.push_back(std::move(tab));
    }
    for (int64_t f = 0; f < F; ++f) {
      std::vector<double> col(H);
      for (int64_t i = 0; i < H; ++i) col[i] = down[i * F + f];
      std::vector<double> r = linear(col, P, cd);
      for (int64_t i = 0; i < count; ++i) {
        const size_t at = static_cast<size_t>(f * keep + first + i);
        std::vector<double> d(static_cast<size_t>(e.codebook_size));
        for (int64_t k = 0; k < e.codebook_size; ++k)
          for (int64_t j = 0; j < cd; ++j) d[k] += (r[j] - tables[i][k * cd + j]) * (r[j] - tables[i][k * cd + j]);
        const int64_t pick = std::min_element(d.begin(), d.end()) - d.begin();
        codes[at] = static_cast<int32_t>(pick);
        if (margins) {
          double second = INFINITY;
          for (int64_t k = 0; k < e.codebook_size; ++k)
            if (k != pick) second = std::min(second, d[k]);
          (*margins)[at] = second - d[pick];
        }
        const int64_t walk = follow ? (*follow)[at] : pick;
        for (int64_t j = 0; j < cd; ++j) r[j] -= tables[i][walk * cd + j];
        if (distances) distances->d[at] = std::move(d);
      }
    }
  }
  return codes;
}

inline ReferenceEncoding reference_encode(const qwen3_tts::ModelFiles& files, const std::vector<double>& wave) {
  using namespace ref_detail;
  const auto& c = files.config.codec;
  const auto& e = c.encoder;
  const Weights w(files.codec, "encoder.");
  ReferenceEncoding out;

  // SEANet
  const Weights l = w.sub("encoder.layers.");
  Mat x = {wave};
  int64_t idx = 0, ch = e.num_filters;
  x = conv(x, l, std::to_string(idx++) + ".conv", ch, e.kernel_size, 1, 1);
  for (auto it = e.upsampling_ratios.rbegin(); it != e.upsampling_ratios.rend(); ++it) {
    int64_t dil = 1;
    for (int64_t r = 0; r < e.num_residual_layers; ++r, dil *= e.dilation_growth_rate) {
      const std::string b = std::to_string(idx++) + ".block.";
      Mat h = x;
      elu(h);
      h = conv(h, l, b + "1.conv", ch / e.compress, e.residual_kernel_size, 1, dil);
      elu(h);
      h = conv(h, l, b + "3.conv", ch, 1, 1, 1);
      for (int64_t i = 0; i < ch; ++i)
        for (size_t t = 0; t < x[i].size(); ++t) x[i][t] += h[i][t];
    }
    elu(x);
    ++idx;
    x = conv(x, l, std::to_string(idx++) + ".conv", 2 * ch, 2 * *it, *it, 1);
    ch *= 2;
  }
  elu(x);
  ++idx;
  x = conv(x, l, std::to_string(idx++) + ".conv", e.hidden_size, e.last_kernel_size, 1, 1);
  const int64_t H = e.hidden_size, T = static_cast<int64_t>(x[0].size());
  for (int64_t i = 0; i < H; ++i) out.stages["seanet"].insert(out.stages["seanet"].end(), x[i].begin(), x[i].end());

  // Transformer, time-major rows.
  std::vector<std::vector<double>> h(T, std::vector<double>(H));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) h[t][i] = x[i][t];
  const int64_t nh = e.num_attention_heads, nkv = e.num_key_value_heads, D = e.head_dim;
  for (int64_t li = 0; li < e.num_hidden_layers; ++li) {
    const Weights p = w.sub("encoder_transformer.layers." + std::to_string(li) + ".");
    const auto n1w = vec(p, "input_layernorm.weight"), n1b = vec(p, "input_layernorm.bias");
    const auto n2w = vec(p, "post_attention_layernorm.weight"), n2b = vec(p, "post_attention_layernorm.bias");
    const auto Wq = vec(p, "self_attn.q_proj.weight"), Wk = vec(p, "self_attn.k_proj.weight"),
               Wv = vec(p, "self_attn.v_proj.weight"), Wo = vec(p, "self_attn.o_proj.weight");
    const auto fc1 = vec(p, "mlp.fc1.weight"), fc2 = vec(p, "mlp.fc2.weight");
    const auto s1 = vec(p, "self_attn_layer_scale.scale"), s2 = vec(p, "mlp_layer_scale.scale");
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const auto xn = layer_norm(h[t], n1w, n1b, e.norm_eps);
      q[t] = linear(xn, Wq, nh * D);
      k[t] = linear(xn, Wk, nkv * D);
      v[t] = linear(xn, Wv, nkv * D);
      for (auto* m : {&q[t], &k[t]}) {  // rotate-half RoPE
        const int64_t heads = static_cast<int64_t>(m->size()) / D;
        for (int64_t hh = 0; hh < heads; ++hh)
          for (int64_t i = 0; i < D / 2; ++i) {
            const double ang = static_cast<double>(t) * std::pow(e.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
            double& a = (*m)[hh * D + i];
            double& b = (*m)[hh * D + i + D / 2];
            const double a0 = a, b0 = b;
            a = a0 * std::cos(ang) - b0 * std::sin(ang);
            b = b0 * std::cos(ang) + a0 * std::sin(ang);
          }
      }
    }
    std::vector<std::vector<double>> next = h;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> att(nh * D, 0.0);
      for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t kh = hh / (nh / nkv);
        const int64_t lo = std::max<int64_t>(0, t - e.sliding_window + 1);
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int64_t j = lo; j <= t; ++j) {
          double s = 0;
          for (int64_t i = 0; i < D; ++i) s += q[t][hh * D + i] * k[j][kh * D + i];
          sc.push_back(s / std::sqrt(static_cast<double>(D)));
          mx = std::max(mx, sc.back());
        }
        double z = 0;
        for (double& s : sc) z += (s = std::exp(s - mx));
        for (int64_t j = lo; j <= t; ++j)
          for (int64_t i = 0; i < D; ++i) att[hh * D + i] += sc[j - lo] / z * v[j][kh * D + i];
      }
      const auto o = linear(att, Wo, H);
      for (int64_t i = 0; i < H; ++i) next[t][i] += s1[i] * o[i];
      const auto xn = layer_norm(next[t], n2w, n2b, e.norm_eps);
      auto mid = linear(xn, fc1, e.intermediate_size);
      for (double& m : mid) m = 0.5 * m * (1.0 + std::erf(m / std::sqrt(2.0)));
      const auto o2 = linear(mid, fc2, H);
      for (int64_t i = 0; i < H; ++i) next[t][i] += s2[i] * o2[i];
    }
    h = std::move(next);
  }
  for (int64_t t = 0; t < T; ++t) out.stages["transformer"].insert(out.stages["transformer"].end(), h[t].begin(), h[t].end());

  // Downsample (replicate padding), then RVQ with exact distances.
  Mat y(H, std::vector<double>(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) y[i][t] = h[t][i];
  y = conv(y, w, "downsample.conv", H, 4, 2, 1, /*replicate=*/true, /*bias=*/false);
  const int64_t F = static_cast<int64_t>(y[0].size());
  for (int64_t i = 0; i < H; ++i) out.stages["downsample"].insert(out.stages["downsample"].end(), y[i].begin(), y[i].end());

  out.codes = rvq_walk(files, out.stages["downsample"], F, nullptr, &out.margins);
  return out;
}

// Our codes against the official ones, where both come from f32 pipelines that sit err_ours and
// err_official (max abs) from the exact downsample output. A decision may differ only if exact
// arithmetic, walking the official codes, puts the two candidates a (ours) and b (official) so close
// that those errors can reorder them: |d(a) − d(b)| <= 2·‖e_a − e_b‖₁·‖P‖∞·(err_ours + err_official)
// (P the group's input projection). After such a decision the rest of that group's codebooks in
// that frame see another residual, so they are excused too.
struct CodeComparison {
  int differing = 0, near_ties = 0, cascaded = 0, unexplained = 0;
  int decisions_within_bound = 0;  // how many of all decisions are that close (a narrow exemption)
  std::string first_unexplained;
};

inline CodeComparison compare_codes(const qwen3_tts::ModelFiles& files, const std::vector<double>& exact_down, int64_t F,
                                    const std::vector<int32_t>& ours, const std::vector<int32_t>& official,
                                    double err_ours, double err_official) {
  RvqDistances dist;
  rvq_walk(files, exact_down, F, &official, nullptr, &dist);
  const auto& c = files.config.codec;
  const int64_t keep = c.encoder_valid_num_quantizers, sem = c.encoder.num_semantic_quantizers, cd = dist.dim;
  CodeComparison out;
  for (int64_t f = 0; f < F; ++f) {
    bool cascade[2] = {false, false};
    for (int64_t i = 0; i < keep; ++i) {
      const size_t at = static_cast<size_t>(f * keep + i);
      const int group = i < sem ? 0 : 1;
      const double scale = 2 * dist.proj_inf_norm[group] * (err_ours + err_official);
      const auto& d = dist.d[at];
      const int32_t b = official[at];
      // Decisions whose runner-up lies within the bound (for the report).
      double second = INFINITY;
      int64_t runner = -1;
      for (int64_t k = 0; k < static_cast<int64_t>(d.size()); ++k)
        if (k != b && d[k] < second) second = d[runner = k];
      auto l1 = [&](int64_t x, int64_t y) {
        double s = 0;
        for (int64_t j = 0; j < cd; ++j) s += std::fabs(dist.vectors[i][x * cd + j] - dist.vectors[i][y * cd + j]);
        return s;
      };
      if (runner >= 0 && std::fabs(second - d[b]) <= scale * l1(runner, b)) ++out.decisions_within_bound;
      const int32_t a = ours[at];
      if (a == b) continue;
      ++out.differing;
      if (cascade[group]) {
        ++out.cascaded;
      } else if (std::fabs(d[a] - d[b]) <= scale * l1(a, b)) {
        ++out.near_ties;
        cascade[group] = true;
      } else {
        if (++out.unexplained == 1)
          out.first_unexplained = "frame " + std::to_string(f) + " codebook " + std::to_string(i) + ": ours " +
                                  std::to_string(a) + ", official " + std::to_string(b) + ", exact distances " +
                                  std::to_string(d[a]) + " vs " + std::to_string(d[b]);
      }
    }
  }
  return out;
}

}  // namespace chorus::test
