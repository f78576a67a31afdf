// The Breeze TTS 2 text encoder on the GPU (text_encoder_cuda.h). The layer follows
// TextEncoder::run_layer step for step, including where the bf16 mode rounds.
#include "models/breeze_tts/text_encoder_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <string>

#include "models/breeze_tts/weights.h"

namespace chorus::breeze_tts::gpu {

namespace {

using nn::gpu::DeviceTensor;

Result<Tensor> need(const io::Checkpoint& ckpt, const std::string& name) {
  Tensor t = ckpt.tensor(name);
  if (t.empty()) return make_error(ErrorCode::kNotFound, ckpt.label() + ": missing tensor '" + name + "'");
  return t;
}

Result<DeviceTensor> upload_f32(const std::vector<float>& v) {
  Tensor t = Tensor::zeros(DType::kF32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.f32());
  return nn::gpu::upload_vector_f32(t);
}

// (1 + w) in f32, as Gemma's norm applies its zero-centred weight.
Result<DeviceTensor> gemma_norm(const io::Checkpoint& ckpt, const std::string& name) {
  CHORUS_ASSIGN(Tensor w, need(ckpt, name));
  const Tensor f = w.to_f32();
  std::vector<float> v(static_cast<size_t>(f.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0f + f.f32()[i];
  return upload_f32(v);
}

Result<DeviceTensor> matrix(const io::Checkpoint& ckpt, const std::string& name) {
  CHORUS_ASSIGN(Tensor t, need(ckpt, name));
  return nn::gpu::upload_matrix(t);
}

constexpr int64_t kInitialRows = 256;

size_t bytes_of(const DeviceTensor& t) { return t.buf.bytes(); }

cuda::LinearOut out_of(const DeviceTensor& w, float* y) { return {w.matrix(), nullptr, y, w.rows}; }

}  // namespace

Result<std::unique_ptr<TextEncoderCuda>> TextEncoderCuda::upload(const Config& c, const io::Checkpoint& ckpt) {
  WeightTable table;
  declare_text_encoder_weights(c, table);
  CHORUS_TRY(table.check(ckpt, ckpt.label()));
  std::unique_ptr<TextEncoderCuda> e(new TextEncoderCuda());
  e->cfg_ = c.text_encoder;
  e->vocab_ = c.text_vocab;
  e->out_hidden_ = c.hidden;
  const std::string p = kTextEncoderPrefix;
  CHORUS_ASSIGN(e->embed_, matrix(ckpt, p + "embed_tokens.weight"));
  CHORUS_ASSIGN(e->proj_, matrix(ckpt, kTextProjection));
  if (e->cfg_.eoi_token_id >= 0) {
    CHORUS_ASSIGN(Tensor eoi, need(ckpt, p + "embed_tokens.eoi_embedding"));
    const Tensor f = eoi.to_f32();
    CHORUS_ASSIGN(e->eoi_row_, upload_f32(std::vector<float>(f.f32(), f.f32() + f.numel())));
  }
  CHORUS_ASSIGN(e->final_norm_, gemma_norm(ckpt, p + "norm.weight"));
  e->bytes_ = bytes_of(e->embed_) + bytes_of(e->proj_) + bytes_of(e->eoi_row_) + bytes_of(e->final_norm_);
  for (int64_t i = 0; i < e->cfg_.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    Layer layer;
    const TextLayerType type = e->cfg_.layer_types[static_cast<size_t>(i)];
    layer.full = type == TextLayerType::kFull;
    CHORUS_ASSIGN(layer.inv_freq, upload_f32(text_rope_inv_freq(e->cfg_, type)));
    struct {
      const char* name;
      DeviceTensor* dst;
    } mats[] = {{"self_attn.q_proj.weight", &layer.q}, {"self_attn.k_proj.weight", &layer.k},
                {"self_attn.v_proj.weight", &layer.v}, {"self_attn.o_proj.weight", &layer.o},
                {"mlp.gate_proj.weight", &layer.gate}, {"mlp.up_proj.weight", &layer.up},
                {"mlp.down_proj.weight", &layer.down}},
      norms[] = {{"pre_self_attn_layernorm.weight", &layer.pre_attn}, {"post_self_attn_layernorm.weight", &layer.post_attn},
                 {"pre_feedforward_layernorm.weight", &layer.pre_ff}, {"post_feedforward_layernorm.weight", &layer.post_ff},
                 {"self_attn.q_norm.weight", &layer.q_norm},          {"self_attn.k_norm.weight", &layer.k_norm}};
    for (auto& m : mats) {
      CHORUS_ASSIGN(*m.dst, matrix(ckpt, l + m.name));
      e->bytes_ += bytes_of(*m.dst);
    }
    for (auto& n : norms) {
      CHORUS_ASSIGN(*n.dst, gemma_norm(ckpt, l + n.name));
      e->bytes_ += bytes_of(*n.dst);
    }
    e->layers_.push_back(std::move(layer));
  }
  CHORUS_ASSIGN(e->stream_, cuda::Stream::create());
  // Scratch and the cuBLAS handle for typical prompts now, so the first request does not pay for them.
  CHORUS_TRY(e->reserve(kInitialRows));
  return e;
}

Status TextEncoderCuda::reserve(int64_t rows) const {
  Scratch& s = scratch_;
  if (rows <= s.rows) return ok_status();
  rows = std::max<int64_t>(rows, 2 * s.rows);
  const int64_t H = cfg_.hidden, Q = cfg_.heads * cfg_.head_dim, KV = cfg_.kv_heads * cfg_.head_dim;
  const int64_t I = cfg_.intermediate;
  const auto f32 = [&](int64_t width) { return static_cast<size_t>(rows * width) * sizeof(float); };
  Scratch n;
  CHORUS_ASSIGN(n.x, cuda::DeviceBuffer::alloc(f32(H)));
  CHORUS_ASSIGN(n.n, cuda::DeviceBuffer::alloc(f32(H)));
  CHORUS_ASSIGN(n.q, cuda::DeviceBuffer::alloc(f32(Q)));
  CHORUS_ASSIGN(n.k, cuda::DeviceBuffer::alloc(f32(KV)));
  CHORUS_ASSIGN(n.v, cuda::DeviceBuffer::alloc(f32(KV)));
  CHORUS_ASSIGN(n.a, cuda::DeviceBuffer::alloc(f32(Q)));
  CHORUS_ASSIGN(n.o, cuda::DeviceBuffer::alloc(f32(H)));
  CHORUS_ASSIGN(n.g, cuda::DeviceBuffer::alloc(f32(I)));
  CHORUS_ASSIGN(n.u, cuda::DeviceBuffer::alloc(f32(I)));
  CHORUS_ASSIGN(n.y, cuda::DeviceBuffer::alloc(f32(out_hidden_)));
  CHORUS_ASSIGN(n.meta, cuda::DeviceBuffer::alloc(static_cast<size_t>(4 * rows) * sizeof(int32_t)));
  const int64_t max_k = std::max({H, Q, I});
  const int64_t max_n = std::max({Q + 2 * KV, 2 * I, H, out_hidden_});
  CHORUS_ASSIGN(cuda::LinearWorkspace ws, cuda::LinearWorkspace::create(rows, max_k, max_n));
  n.linear = std::make_unique<cuda::LinearWorkspace>(std::move(ws));
  n.rows = rows;
  s = std::move(n);
  return ok_status();
}

Status TextEncoderCuda::run_layer(const Layer& l, cuda::PackedRows pr, int64_t longest, bool rnd) const {
  Scratch& s = scratch_;
  cudaStream_t st = stream_.get();
  const int64_t R = pr.rows, H = cfg_.hidden, nh = cfg_.heads, nkv = cfg_.kv_heads, hd = cfg_.head_dim;
  const int64_t I = cfg_.intermediate;
  const float eps = static_cast<float>(cfg_.rms_eps);
  float *x = s.x.as<float>(), *n = s.n.as<float>(), *q = s.q.as<float>(), *k = s.k.as<float>(), *v = s.v.as<float>();
  float *a = s.a.as<float>(), *o = s.o.as<float>(), *g = s.g.as<float>(), *u = s.u.as<float>();
  auto round_if = [&](float* p, int64_t count) { return rnd ? cuda::round_bf16_inplace(p, count, st) : ok_status(); };

  // Attention block: sandwich norms around it.
  CHORUS_TRY(cuda::norm_rows(x, l.pre_attn.f32(), n, R, H, eps, rnd, st));
  cuda::LinearArgs qkv;
  qkv.x = n, qkv.ldx = H, qkv.M = R;
  qkv.out[0] = out_of(l.q, q), qkv.out[1] = out_of(l.k, k), qkv.out[2] = out_of(l.v, v);
  qkv.outputs = 3;
  CHORUS_TRY(cuda::linear(qkv, s.linear.get(), st));
  CHORUS_TRY(round_if(q, R * nh * hd));
  CHORUS_TRY(round_if(k, R * nkv * hd));
  CHORUS_TRY(round_if(v, R * nkv * hd));
  CHORUS_TRY(cuda::norm_rows(q, l.q_norm.f32(), q, R * nh, hd, eps, rnd, st));
  CHORUS_TRY(cuda::norm_rows(k, l.k_norm.f32(), k, R * nkv, hd, eps, rnd, st));
  CHORUS_TRY(cuda::rope_rows(q, nh, hd, pr, l.inv_freq.f32(), rnd, st));
  CHORUS_TRY(cuda::rope_rows(k, nkv, hd, pr, l.inv_freq.f32(), rnd, st));
  cuda::WindowAttention att;
  att.q = q, att.k = k, att.v = v, att.out = a;
  att.h = {nh, nkv, hd};
  att.scale = static_cast<float>(1.0 / std::sqrt(cfg_.query_pre_attn_scalar));
  att.full = l.full;
  att.left = static_cast<int32_t>((cfg_.sliding_window + 1) / 2);
  att.right = static_cast<int32_t>(cfg_.sliding_window / 2 + 1);
  att.round_bf16 = rnd;
  CHORUS_TRY(cuda::window_attention(att, pr, longest, st));
  cuda::LinearArgs op;
  op.x = a, op.ldx = nh * hd, op.M = R;
  op.out[0] = out_of(l.o, o);
  CHORUS_TRY(cuda::linear(op, s.linear.get(), st));
  CHORUS_TRY(round_if(o, R * H));
  CHORUS_TRY(cuda::norm_add_rows(o, l.post_attn.f32(), x, R, H, eps, rnd, st));

  // Feed-forward block: down(gelu_tanh(gate(n)) * up(n)).
  CHORUS_TRY(cuda::norm_rows(x, l.pre_ff.f32(), n, R, H, eps, rnd, st));
  cuda::LinearArgs gu;
  gu.x = n, gu.ldx = H, gu.M = R;
  gu.out[0] = out_of(l.gate, g), gu.out[1] = out_of(l.up, u);
  gu.outputs = 2;
  CHORUS_TRY(cuda::linear(gu, s.linear.get(), st));
  CHORUS_TRY(round_if(g, R * I));
  CHORUS_TRY(round_if(u, R * I));
  CHORUS_TRY(cuda::gelu_tanh_mul(g, u, g, R * I, rnd, st));
  cuda::LinearArgs dn;
  dn.x = g, dn.ldx = I, dn.M = R;
  dn.out[0] = out_of(l.down, o);
  CHORUS_TRY(cuda::linear(dn, s.linear.get(), st));
  CHORUS_TRY(round_if(o, R * H));
  return cuda::norm_add_rows(o, l.post_ff.f32(), x, R, H, eps, rnd, st);
}

Result<std::vector<Tensor>> TextEncoderCuda::encode(std::span<const std::vector<int32_t>> segments, Activations act,
                                                    bool project) const {
  // Checks as TextEncoder::encode, then the packed row table: ids, position, segment start, length.
  std::vector<int32_t> meta;
  int64_t R = 0, longest = 0;
  for (const auto& ids : segments) {
    const int64_t L = static_cast<int64_t>(ids.size());
    if (L == 0) return make_error(ErrorCode::kInvalidArgument, "text encoder: empty text segment");
    if (L > cfg_.max_positions || L > cuda::kMaxAttentionKeys)
      return make_error(ErrorCode::kOutOfRange, "text encoder: a segment of " + std::to_string(L) +
                                                    " tokens exceeds the positions of the (GPU) encoder");
    for (const int32_t id : ids)
      if (id < 0 || id >= vocab_)
        return make_error(ErrorCode::kInvalidArgument, "text encoder: token id " + std::to_string(id) +
                                                           " is outside the vocabulary [0, " + std::to_string(vocab_) + ")");
    R += L;
    longest = std::max(longest, L);
    if (R > (int64_t{1} << 30)) return make_error(ErrorCode::kOutOfRange, "text encoder: too many rows");
  }
  if (R == 0) return std::vector<Tensor>{};
  meta.resize(static_cast<size_t>(4 * R));
  int32_t* ids_h = meta.data();
  int32_t *pos_h = ids_h + R, *start_h = pos_h + R, *len_h = start_h + R;
  int64_t r = 0;
  for (const auto& ids : segments) {
    const int64_t start = r, L = static_cast<int64_t>(ids.size());
    for (int64_t t = 0; t < L; ++t, ++r) {
      ids_h[r] = ids[static_cast<size_t>(t)];
      pos_h[r] = static_cast<int32_t>(t);
      start_h[r] = static_cast<int32_t>(start);
      len_h[r] = static_cast<int32_t>(L);
    }
  }

  std::lock_guard<std::mutex> lock(mu_);
  CHORUS_TRY(reserve(R));
  Scratch& s = scratch_;
  cudaStream_t st = stream_.get();
  const bool rnd = act == Activations::kBF16;
  const int64_t H = cfg_.hidden;
  int32_t* ids_d = s.meta.as<int32_t>();
  // Rows of the packed table sit at multiples of the reserved capacity, so one copy fills them.
  std::vector<int32_t> padded(static_cast<size_t>(4 * s.rows), 0);
  for (int part = 0; part < 4; ++part)
    std::copy(meta.begin() + part * R, meta.begin() + (part + 1) * R, padded.begin() + part * s.rows);
  CHORUS_CUDA_TRY(cudaMemcpyAsync(ids_d, padded.data(), padded.size() * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  const cuda::PackedRows pr{ids_d + s.rows, ids_d + 2 * s.rows, ids_d + 3 * s.rows, R};

  float* x = s.x.as<float>();
  CHORUS_TRY(cuda::scaled_embedding(embed_.matrix(), ids_d, R, text_embed_scale(H, act),
                                    static_cast<int32_t>(cfg_.eoi_token_id), eoi_row_.empty() ? nullptr : eoi_row_.f32(),
                                    rnd, x, st));
  for (const Layer& l : layers_) CHORUS_TRY(run_layer(l, pr, longest, rnd));
  CHORUS_TRY(cuda::norm_rows(x, final_norm_.f32(), x, R, H, static_cast<float>(cfg_.rms_eps), rnd, st));
  const float* result = x;
  int64_t width = H;
  if (project) {
    cuda::LinearArgs pj;
    pj.x = x, pj.ldx = H, pj.M = R;
    pj.out[0] = out_of(proj_, s.y.as<float>());
    CHORUS_TRY(cuda::linear(pj, s.linear.get(), st));
    if (rnd) CHORUS_TRY(cuda::round_bf16_inplace(s.y.as<float>(), R * out_hidden_, st));
    result = s.y.as<float>();
    width = out_hidden_;
  }
  std::vector<Tensor> out;
  r = 0;
  for (const auto& ids : segments) {
    const int64_t L = static_cast<int64_t>(ids.size());
    Tensor t = Tensor::zeros(DType::kF32, {L, width});
    CHORUS_CUDA_TRY(cudaMemcpyAsync(t.f32(), result + r * width, static_cast<size_t>(L * width) * sizeof(float),
                                    cudaMemcpyDeviceToHost, st));
    out.push_back(std::move(t));
    r += L;
  }
  CHORUS_TRY(stream_.synchronize());
  return out;
}

Result<std::vector<Tensor>> prompt_rows_cuda(const Config& c, std::span<const PromptLayout> layouts, const RefCodes& ref,
                                             const TextEncoderCuda& encoder, const Tensor& audio_table, Activations act) {
  // Checked before the encoder runs (assemble_prompt_rows checks it again, for the CPU path).
  if (audio_table.shape() != Shape{c.num_codebooks * c.audio_vocab, c.audio_embed})
    return make_error(ErrorCode::kShapeMismatch, "prompt: the audio table has shape " + shape_to_string(audio_table.shape()));
  std::vector<std::vector<int32_t>> segments;
  for (const PromptLayout& l : layouts) segments.insert(segments.end(), l.text_segments.begin(), l.text_segments.end());
  CHORUS_ASSIGN(std::vector<Tensor> encoded, encoder.encode(segments, act, /*project=*/true));
  std::vector<Tensor> all;
  size_t first = 0;  // the layout's first segment in `encoded`
  for (const PromptLayout& layout : layouts) {
    CHORUS_ASSIGN(Tensor rows, assemble_prompt_rows(c, layout, ref, audio_table, act, [&](size_t i) -> Result<Tensor> {
      if (first + i >= encoded.size()) return make_error(ErrorCode::kInternal, "prompt: more text rows than text segments");
      return encoded[first + i];
    }));
    first += layout.text_segments.size();
    all.push_back(std::move(rows));
  }
  return all;
}

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
