#include "nn/qwen3_stack.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "nn/bf16_ops.h"

namespace chorus::nn {

namespace {

// Elements of row-wise or elementwise work per thread below which splitting costs more than it saves.
constexpr int64_t kSplitElements = 4096;

Result<Tensor> need(const Weights& w, const std::string& name, bool as_f32) {
  if (!w.has(name)) return make_error(ErrorCode::kNotFound, "missing tensor " + name);
  return as_f32 ? w.f32(name) : w.raw(name);
}

// Per-call activations for `rows` rows.
struct Activations {
  std::vector<float> h, a, q, k, v, attn, gate, up;
  Activations(int64_t rows, const Qwen3Dims& d) {
    const auto R = static_cast<size_t>(rows);
    h.resize(R * d.hidden);
    a.resize(R * d.hidden);
    q.resize(R * d.heads * d.head_dim);
    k.resize(R * d.kv_heads * d.head_dim);
    v.resize(R * d.kv_heads * d.head_dim);
    attn.resize(R * d.heads * d.head_dim);
    gate.resize(R * d.intermediate);
    up.resize(R * d.intermediate);
  }
};

void add_in_place(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

Result<Qwen3Stack> Qwen3Stack::load(const Weights& w, const Qwen3Dims& d, bool qk_norm, cpu::WeightFormat format,
                                    ThreadPool* pool) {
  Qwen3Stack s;
  s.dims_ = d;
  s.format_ = format;
  const auto proj = [&](const Weights& lw, const std::string& name) -> Result<cpu::LinearWeight> {
    CHORUS_ASSIGN(Tensor t, need(lw, name, false));
    auto r = cpu::LinearWeight::load(std::move(t), format, pool);
    if (!r.ok()) return make_error(r.error().code, name + ": " + r.error().message);
    return r;
  };
  s.layers_.resize(static_cast<size_t>(d.layers));
  for (int64_t i = 0; i < d.layers; ++i) {
    const Weights lw = w.sub("layers." + std::to_string(i) + ".");
    Qwen3LayerWeights& L = s.layers_[static_cast<size_t>(i)];
    CHORUS_ASSIGN(L.q_proj, proj(lw, "self_attn.q_proj.weight"));
    CHORUS_ASSIGN(L.k_proj, proj(lw, "self_attn.k_proj.weight"));
    CHORUS_ASSIGN(L.v_proj, proj(lw, "self_attn.v_proj.weight"));
    CHORUS_ASSIGN(L.o_proj, proj(lw, "self_attn.o_proj.weight"));
    CHORUS_ASSIGN(L.gate_proj, proj(lw, "mlp.gate_proj.weight"));
    CHORUS_ASSIGN(L.up_proj, proj(lw, "mlp.up_proj.weight"));
    CHORUS_ASSIGN(L.down_proj, proj(lw, "mlp.down_proj.weight"));
    CHORUS_ASSIGN(L.input_norm, need(lw, "input_layernorm.weight", true));
    CHORUS_ASSIGN(L.post_norm, need(lw, "post_attention_layernorm.weight", true));
    if (qk_norm) {
      CHORUS_ASSIGN(L.q_norm, need(lw, "self_attn.q_norm.weight", true));
      CHORUS_ASSIGN(L.k_norm, need(lw, "self_attn.k_norm.weight", true));
    }
  }
  CHORUS_ASSIGN(s.final_norm_, need(w, "norm.weight", true));
  s.inv_freq_.resize(static_cast<size_t>(d.head_dim / 2));
  cpu::rope_inv_freq(static_cast<float>(d.rope_theta), d.head_dim, s.inv_freq_.data());
  return s;
}

Status Qwen3Stack::set_rope_inv_freq(std::vector<float> inv_freq) {
  if (static_cast<int64_t>(inv_freq.size()) != dims_.head_dim / 2)
    return make_error(ErrorCode::kInvalidArgument, "qwen3 stack: " + std::to_string(inv_freq.size()) +
                                                       " RoPE frequencies for head_dim " + std::to_string(dims_.head_dim));
  for (float f : inv_freq)
    if (!(f > 0.0f) || !std::isfinite(f))
      return make_error(ErrorCode::kInvalidArgument, "qwen3 stack: RoPE frequencies must be finite and positive");
  inv_freq_ = std::move(inv_freq);
  return ok_status();
}

size_t Qwen3Stack::projection_bytes() const {
  size_t n = 0;
  for (const Qwen3LayerWeights& L : layers_)
    for (const cpu::LinearWeight* w : {&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj, &L.down_proj})
      n += w->bytes();
  return n;
}

KvCache Qwen3Stack::make_cache() const {
  return KvCache(dims_.layers, dims_.kv_heads, dims_.head_dim, dims_.max_positions);
}

Status Qwen3Stack::forward(std::span<const SequenceRows> seqs, const float* x, float* out, ThreadPool* pool,
                           Rounding rounding, const LayerTap* tap) const {
  const Qwen3Dims& d = dims_;
  int64_t R = 0;
  for (const SequenceRows& s : seqs) {
    if (!s.cache || s.cache->layers() != d.layers || s.cache->row_width() != d.kv_heads * d.head_dim)
      return make_error(ErrorCode::kInternal, "qwen3 stack: a sequence has no cache of this stack's shape");
    if (s.rows <= 0 || s.pos0 < 0 || s.pos0 > s.cache->length())
      return make_error(ErrorCode::kInternal, "qwen3 stack: rows at position " + std::to_string(s.pos0) +
                                                  " would leave a gap in a cache of length " +
                                                  std::to_string(s.cache->length()));
    CHORUS_TRY(s.cache->reserve(s.pos0 + s.rows));
    R += s.rows;
  }
  if (R == 0) return ok_status();

  const int64_t H = d.hidden, D = d.head_dim, qw = d.heads * D, kvw = d.kv_heads * D;
  const float eps = static_cast<float>(d.rms_eps), scale = 1.0f / std::sqrt(static_cast<float>(D));
  Activations act(R, d);
  std::vector<int64_t> positions(static_cast<size_t>(R));
  for (int64_t r = 0; const SequenceRows& s : seqs)
    for (int64_t t = 0; t < s.rows; ++t) positions[static_cast<size_t>(r++)] = s.pos0 + t;
  std::copy(x, x + R * H, act.h.data());
  float* h = act.h.data();
  // The f32 path calls exactly the kernels it always did; bf16 swaps in nn/bf16_ops and rounds.
  const bool b16 = rounding == Rounding::kBF16;
  const auto round = [b16](float* p, int64_t n) {
    if (b16) bf16::round(p, n);
  };
  // Row-wise and elementwise work is split over the pool once several streams' rows make enough
  // of it (a single stream's runs inline); every value is computed as it is unsplit.
  const auto split = [pool](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool) pool->parallel_for(n, fn, grain);
    else fn(0, n);
  };
  const auto rows_grain = [](int64_t width) {
    return std::max<int64_t>(1, kSplitElements / std::max<int64_t>(width, 1));
  };
  const auto norm = [&](const float* in, const Tensor& w, float* o, int64_t rows, int64_t dim) {
    split(rows, rows_grain(dim), [&](int64_t a, int64_t b) {
      if (b16) bf16::rms_norm(in + a * dim, w.f32(), o + a * dim, b - a, dim, eps);
      else cpu::rms_norm(in + a * dim, w.f32(), o + a * dim, b - a, dim, eps);
    });
  };
  const auto rope = [&](float* p, int64_t heads) {
    split(R, rows_grain(heads * D), [&](int64_t a, int64_t b) {
      if (b16) bf16::rope(p + a * heads * D, b - a, heads, D, positions.data() + a, inv_freq_.data());
      else cpu::rope(p + a * heads * D, b - a, heads, D, positions.data() + a, inv_freq_.data());
    });
  };
  const auto silu_mul = [&](float* gate, const float* up, int64_t n) {
    split(n, kSplitElements, [&](int64_t a, int64_t b) {
      if (b16) bf16::silu_mul(gate + a, up + a, gate + a, b - a);
      else cpu::silu_mul(gate + a, up + a, gate + a, b - a);
    });
  };
  const auto lin = [&](const float* in, const cpu::LinearWeight& w, float* o, int64_t out_width) {
    cpu::linear(in, R, w, nullptr, o, pool);
    round(o, R * out_width);
  };
  // Products sharing their input run as one parallel pass (the same values as one by one).
  const auto lin2 = [&](const float* in, std::initializer_list<cpu::LinearOutput> outs) {
    cpu::linear_fused(in, R, {outs.begin(), outs.size()}, pool);
    for (const cpu::LinearOutput& o : outs) round(o.y, R * o.w->rows());
  };
  const auto residual = [&](const float* a) {
    add_in_place(h, a, R * H);
    round(h, R * H);
  };
  round(h, R * H);

  for (int64_t li = 0; li < d.layers; ++li) {
    const Qwen3LayerWeights& L = layers_[static_cast<size_t>(li)];
    norm(h, L.input_norm, act.a.data(), R, H);
    lin2(act.a.data(), {{&L.q_proj, act.q.data()}, {&L.k_proj, act.k.data()}, {&L.v_proj, act.v.data()}});
    if (!L.q_norm.empty()) {
      norm(act.q.data(), L.q_norm, act.q.data(), R * d.heads, D);
      norm(act.k.data(), L.k_norm, act.k.data(), R * d.kv_heads, D);
    }
    rope(act.q.data(), d.heads);
    rope(act.k.data(), d.kv_heads);
    for (int64_t r0 = 0; const SequenceRows& s : seqs) {
      float* kc = s.cache->keys(li) + s.pos0 * kvw;
      float* vc = s.cache->values(li) + s.pos0 * kvw;
      std::copy(act.k.data() + r0 * kvw, act.k.data() + (r0 + s.rows) * kvw, kc);
      std::copy(act.v.data() + r0 * kvw, act.v.data() + (r0 + s.rows) * kvw, vc);
      if (b16)
        bf16::attention(act.q.data() + r0 * qw, s.rows, d.heads, s.cache->keys(li), s.cache->values(li), d.kv_heads,
                        D, s.pos0, scale, act.attn.data() + r0 * qw, pool);
      else
        cpu::attention(act.q.data() + r0 * qw, s.rows, d.heads, s.cache->keys(li), s.cache->values(li),
                       s.pos0 + s.rows, d.kv_heads, D, s.pos0, /*window=*/0, scale, act.attn.data() + r0 * qw,
                       pool);
      r0 += s.rows;
    }
    lin(act.attn.data(), L.o_proj, act.a.data(), H);
    residual(act.a.data());

    norm(h, L.post_norm, act.a.data(), R, H);
    lin2(act.a.data(), {{&L.gate_proj, act.gate.data()}, {&L.up_proj, act.up.data()}});
    silu_mul(act.gate.data(), act.up.data(), R * d.intermediate);
    lin(act.gate.data(), L.down_proj, act.a.data(), H);
    residual(act.a.data());
    if (tap) (*tap)(li, h, R);
  }
  for (const SequenceRows& s : seqs) s.cache->set_length(s.pos0 + s.rows);
  norm(h, final_norm_, out, R, H);
  if (tap) (*tap)(d.layers, out, R);
  return ok_status();
}

}  // namespace chorus::nn
