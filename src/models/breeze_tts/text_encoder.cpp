#include "models/breeze_tts/text_encoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "io/safetensors.h"
#include "models/breeze_tts/weights.h"
#include "runtime/cpu/kernels.h"

namespace chorus::breeze_tts {

namespace {

// (1 + w) in f32, as Gemma's norm applies its zero-centred weight.
std::vector<float> gemma_norm_weight(const Tensor& w) {
  const Tensor f = w.to_f32();
  std::vector<float> out(static_cast<size_t>(f.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = 1.0f + f.f32()[i];
  return out;
}

void round_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

// GELU, tanh approximation ("gelu_pytorch_tanh").
float gelu_tanh(float x) {
  const double xd = x;
  const double inner = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);  // sqrt(2/pi)
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(inner)));
}

// Rotate-half RoPE with cos/sin and every product rounded to bf16, as a bf16 PyTorch run does.
void rope_bf16(float* x, int64_t L, int64_t heads, int64_t hd, const std::vector<float>& inv_freq) {
  const int64_t half = hd / 2;
  for (int64_t t = 0; t < L; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[static_cast<size_t>(i)];
      const float c = round_to_bf16(std::cos(angle)), s = round_to_bf16(std::sin(angle));
      for (int64_t h = 0; h < heads; ++h) {
        float* xh = x + (t * heads + h) * hd;
        const float a = xh[i], b = xh[i + half];
        xh[i] = round_to_bf16(round_to_bf16(a * c) - round_to_bf16(b * s));
        xh[i + half] = round_to_bf16(round_to_bf16(b * c) + round_to_bf16(a * s));
      }
    }
}

}  // namespace

float text_embed_scale(int64_t hidden, Activations act) {
  const float scale = std::sqrt(static_cast<float>(hidden));
  return act == Activations::kBF16 ? round_to_bf16(scale) : scale;
}

bool text_key_visible(int64_t i, int64_t j, TextLayerType type, int64_t window) {
  if (type == TextLayerType::kFull) return true;
  const int64_t left = (window + 1) / 2, right = window / 2 + 1;
  const int64_t d = i - j;
  return (d >= 0 && d < left) || (d < 0 && -d < right);
}

std::vector<float> text_rope_inv_freq(const TextEncoderConfig& c, TextLayerType type) {
  const TextRope& r = type == TextLayerType::kFull ? c.rope_full : c.rope_sliding;
  std::vector<float> inv(static_cast<size_t>(c.head_dim / 2));
  cpu::rope_inv_freq(static_cast<float>(r.theta), c.head_dim, inv.data());
  if (r.linear_factor != 1.0)
    for (auto& f : inv) f = f / static_cast<float>(r.linear_factor);
  return inv;
}

Result<TextEncoder> TextEncoder::create(const Config& c, const io::Checkpoint& ckpt, Activations act) {
  // Cheap next to loading, and the kernels below trust every shape.
  WeightTable table;
  declare_text_encoder_weights(c, table);
  CHORUS_TRY(table.check(ckpt, ckpt.label()));
  TextEncoder e;
  e.cfg_ = c.text_encoder;
  e.vocab_ = c.text_vocab;
  e.out_hidden_ = c.hidden;
  e.act_ = act;
  // Upstream multiplies by sqrt(H) cast to the weight dtype: bf16 rounds sqrt(1152) to 34.0.
  e.embed_scale_ = text_embed_scale(e.cfg_.hidden, act);
  const std::string p = kTextEncoderPrefix;
  auto need = [&](const std::string& name) -> Result<Tensor> {
    Tensor t = ckpt.tensor(name);
    if (t.empty()) return make_error(ErrorCode::kNotFound, ckpt.label() + ": missing tensor '" + name + "'");
    return t;
  };
  CHORUS_ASSIGN(e.embed_, need(p + "embed_tokens.weight"));
  CHORUS_ASSIGN(e.proj_, need(kTextProjection));
  if (e.cfg_.eoi_token_id >= 0) {
    CHORUS_ASSIGN(Tensor eoi, need(p + "embed_tokens.eoi_embedding"));
    const Tensor f = eoi.to_f32();
    e.eoi_row_.assign(f.f32(), f.f32() + f.numel());
  }
  CHORUS_ASSIGN(Tensor fn, need(p + "norm.weight"));
  e.final_norm_ = gemma_norm_weight(fn);
  for (int64_t i = 0; i < e.cfg_.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    Layer layer;
    layer.type = e.cfg_.layer_types[static_cast<size_t>(i)];
    layer.inv_freq = text_rope_inv_freq(e.cfg_, layer.type);
    CHORUS_ASSIGN(layer.q, need(l + "self_attn.q_proj.weight"));
    CHORUS_ASSIGN(layer.k, need(l + "self_attn.k_proj.weight"));
    CHORUS_ASSIGN(layer.v, need(l + "self_attn.v_proj.weight"));
    CHORUS_ASSIGN(layer.o, need(l + "self_attn.o_proj.weight"));
    CHORUS_ASSIGN(layer.gate, need(l + "mlp.gate_proj.weight"));
    CHORUS_ASSIGN(layer.up, need(l + "mlp.up_proj.weight"));
    CHORUS_ASSIGN(layer.down, need(l + "mlp.down_proj.weight"));
    struct {
      const char* name;
      std::vector<float>* dst;
    } norms[] = {{"pre_self_attn_layernorm.weight", &layer.pre_attn}, {"post_self_attn_layernorm.weight", &layer.post_attn},
                 {"pre_feedforward_layernorm.weight", &layer.pre_ff}, {"post_feedforward_layernorm.weight", &layer.post_ff},
                 {"self_attn.q_norm.weight", &layer.q_norm},          {"self_attn.k_norm.weight", &layer.k_norm}};
    for (auto& n : norms) {
      CHORUS_ASSIGN(Tensor w, need(l + n.name));
      *n.dst = gemma_norm_weight(w);
    }
    e.layers_.push_back(std::move(layer));
  }
  return e;
}

void TextEncoder::round_act(float* x, int64_t n) const {
  if (act_ == Activations::kBF16) round_bf16(x, n);
}

void TextEncoder::attention(const Layer& l, const float* q, const float* k, const float* v, int64_t L, float* out,
                            ThreadPool* pool) const {
  const int64_t nh = cfg_.heads, nkv = cfg_.kv_heads, hd = cfg_.head_dim, group = nh / nkv;
  const float scale = static_cast<float>(1.0 / std::sqrt(cfg_.query_pre_attn_scalar));
  const bool bf16 = act_ == Activations::kBF16;
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(L));
    std::vector<double> acc(static_cast<size_t>(hd));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t h = task / L, i = task % L, kvh = h / group;
      const float* qi = q + (i * nh + h) * hd;
      // The visible keys form one contiguous range around i.
      int64_t lo = 0, hi = L;
      if (l.type == TextLayerType::kSliding) {
        lo = std::max<int64_t>(0, i - (cfg_.sliding_window + 1) / 2 + 1);
        hi = std::min<int64_t>(L, i + cfg_.sliding_window / 2 + 1);
      }
      float mx = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) {
        const float* kj = k + (j * nkv + kvh) * hd;
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qi[d]) * kj[d];
        float s = static_cast<float>(dot);
        s = bf16 ? round_to_bf16(round_to_bf16(s) * scale) : s * scale;
        p[static_cast<size_t>(j)] = s;
        mx = std::max(mx, s);
      }
      double sum = 0.0;
      for (int64_t j = lo; j < hi; ++j) {
        const float ex = std::exp(p[static_cast<size_t>(j)] - mx);
        p[static_cast<size_t>(j)] = ex;
        sum += ex;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = lo; j < hi; ++j) {
        float w = static_cast<float>(p[static_cast<size_t>(j)] / sum);
        if (bf16) w = round_to_bf16(w);
        const float* vj = v + (j * nkv + kvh) * hd;
        for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] += static_cast<double>(w) * vj[d];
      }
      float* oi = out + (i * nh + h) * hd;
      for (int64_t d = 0; d < hd; ++d) oi[d] = static_cast<float>(acc[static_cast<size_t>(d)]);
      if (bf16) round_bf16(oi, hd);
    }
  };
  if (pool) pool->parallel_for(nh * L, work, 1);
  else work(0, nh * L);
}

void TextEncoder::run_layer(const Layer& l, float* x, int64_t L, ThreadPool* pool) const {
  const int64_t H = cfg_.hidden, nh = cfg_.heads, nkv = cfg_.kv_heads, hd = cfg_.head_dim, I = cfg_.intermediate;
  const float eps = static_cast<float>(cfg_.rms_eps);
  std::vector<float> n(static_cast<size_t>(L * H)), q(static_cast<size_t>(L * nh * hd)),
      k(static_cast<size_t>(L * nkv * hd)), v(static_cast<size_t>(L * nkv * hd)), a(static_cast<size_t>(L * nh * hd)),
      o(static_cast<size_t>(L * H));
  std::vector<int64_t> pos(static_cast<size_t>(L));
  std::iota(pos.begin(), pos.end(), 0);

  // Attention block: sandwich norms around it.
  cpu::rms_norm(x, l.pre_attn.data(), n.data(), L, H, eps);
  round_act(n.data(), L * H);
  cpu::linear(n.data(), L, cpu::MatrixRef::of(l.q), nullptr, q.data(), pool);
  cpu::linear(n.data(), L, cpu::MatrixRef::of(l.k), nullptr, k.data(), pool);
  cpu::linear(n.data(), L, cpu::MatrixRef::of(l.v), nullptr, v.data(), pool);
  round_act(q.data(), L * nh * hd), round_act(k.data(), L * nkv * hd), round_act(v.data(), L * nkv * hd);
  cpu::rms_norm(q.data(), l.q_norm.data(), q.data(), L * nh, hd, eps);
  cpu::rms_norm(k.data(), l.k_norm.data(), k.data(), L * nkv, hd, eps);
  if (act_ == Activations::kBF16) {
    round_bf16(q.data(), L * nh * hd), round_bf16(k.data(), L * nkv * hd);
    rope_bf16(q.data(), L, nh, hd, l.inv_freq);
    rope_bf16(k.data(), L, nkv, hd, l.inv_freq);
  } else {
    cpu::rope(q.data(), L, nh, hd, pos.data(), l.inv_freq.data());
    cpu::rope(k.data(), L, nkv, hd, pos.data(), l.inv_freq.data());
  }
  attention(l, q.data(), k.data(), v.data(), L, a.data(), pool);
  cpu::linear(a.data(), L, cpu::MatrixRef::of(l.o), nullptr, o.data(), pool);
  round_act(o.data(), L * H);
  cpu::rms_norm(o.data(), l.post_attn.data(), o.data(), L, H, eps);
  round_act(o.data(), L * H);
  for (int64_t i = 0; i < L * H; ++i) x[i] += o[static_cast<size_t>(i)];
  round_act(x, L * H);

  // Feed-forward block: down(gelu_tanh(gate(n)) * up(n)).
  std::vector<float> g(static_cast<size_t>(L * I)), u(static_cast<size_t>(L * I));
  cpu::rms_norm(x, l.pre_ff.data(), n.data(), L, H, eps);
  round_act(n.data(), L * H);
  cpu::linear(n.data(), L, cpu::MatrixRef::of(l.gate), nullptr, g.data(), pool);
  cpu::linear(n.data(), L, cpu::MatrixRef::of(l.up), nullptr, u.data(), pool);
  round_act(g.data(), L * I), round_act(u.data(), L * I);
  for (size_t i = 0; i < g.size(); ++i) {
    float act = gelu_tanh(g[i]);
    if (act_ == Activations::kBF16) act = round_to_bf16(act);
    g[i] = act * u[i];
  }
  round_act(g.data(), L * I);
  cpu::linear(g.data(), L, cpu::MatrixRef::of(l.down), nullptr, o.data(), pool);
  round_act(o.data(), L * H);
  cpu::rms_norm(o.data(), l.post_ff.data(), o.data(), L, H, eps);
  round_act(o.data(), L * H);
  for (int64_t i = 0; i < L * H; ++i) x[i] += o[static_cast<size_t>(i)];
  round_act(x, L * H);
}

Result<Tensor> TextEncoder::encode(std::span<const int32_t> ids, ThreadPool* pool, TextEncoderTrace* trace) const {
  const int64_t L = static_cast<int64_t>(ids.size()), H = cfg_.hidden;
  if (L == 0) return make_error(ErrorCode::kInvalidArgument, "text encoder: empty text segment");
  if (L > cfg_.max_positions)
    return make_error(ErrorCode::kOutOfRange, "text encoder: a segment of " + std::to_string(L) + " tokens exceeds " +
                                                  std::to_string(cfg_.max_positions) + " positions");
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab_)
      return make_error(ErrorCode::kInvalidArgument, "text encoder: token id " + std::to_string(id) +
                                                         " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
  Tensor x = Tensor::zeros(DType::kF32, {L, H});
  float* xd = x.f32();
  cpu::embedding(cpu::MatrixRef::of(embed_), ids.data(), L, xd);
  for (int64_t t = 0; t < L; ++t) {
    float* row = xd + t * H;
    if (!eoi_row_.empty() && ids[static_cast<size_t>(t)] == cfg_.eoi_token_id) {
      std::copy(eoi_row_.begin(), eoi_row_.end(), row);  // the eoi row is used unscaled
    } else {
      for (int64_t i = 0; i < H; ++i) row[i] *= embed_scale_;
      round_act(row, H);
    }
  }
  if (trace) {
    trace->embeddings = Tensor::zeros(DType::kF32, {L, H});
    std::copy(xd, xd + L * H, trace->embeddings.f32());
    trace->layer_outputs.clear();
  }
  for (const Layer& l : layers_) {
    run_layer(l, xd, L, pool);
    if (trace) {
      Tensor out = Tensor::zeros(DType::kF32, {L, H});
      std::copy(xd, xd + L * H, out.f32());
      trace->layer_outputs.push_back(std::move(out));
    }
  }
  cpu::rms_norm(xd, final_norm_.data(), xd, L, H, static_cast<float>(cfg_.rms_eps));
  round_act(xd, L * H);
  return x;
}

Tensor TextEncoder::project(const Tensor& encoded, ThreadPool* pool) const {
  const int64_t L = encoded.dim(0);
  Tensor out = Tensor::zeros(DType::kF32, {L, out_hidden_});
  cpu::linear(encoded.f32(), L, cpu::MatrixRef::of(proj_), nullptr, out.f32(), pool);
  round_act(out.f32(), L * out_hidden_);
  return out;
}

Result<Tensor> TextEncoder::encode_projected(std::span<const int32_t> ids, ThreadPool* pool) const {
  CHORUS_ASSIGN(Tensor enc, encode(ids, pool));
  return project(enc, pool);
}

}  // namespace chorus::breeze_tts
