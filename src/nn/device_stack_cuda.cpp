#ifdef CHORUS_HAVE_CUDA

#include "nn/device_stack_cuda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/kernels.h"

namespace chorus::nn::gpu {

namespace {

Result<Tensor> need(const Weights& w, const std::string& name) {
  if (!w.has(name)) return make_error(ErrorCode::kNotFound, "missing tensor " + name);
  return w.raw(name);
}

}  // namespace

Result<DeviceTensor> load_matrix(const Weights& w, const std::string& name) {
  CHORUS_ASSIGN(Tensor t, need(w, name));
  return upload_matrix(t);
}

Result<DeviceTensor> load_vector_f32(const Weights& w, const std::string& name) {
  if (!w.has(name)) return make_error(ErrorCode::kNotFound, "missing tensor " + name);
  return upload_vector_f32(w.f32(name));
}

Result<DeviceTensor> load_matrix(const Weights& w, const std::string& name, cpu::WeightFormat format,
                                 ThreadPool* pool) {
  if (format == cpu::WeightFormat::kBf16) return load_matrix(w, name);
  CHORUS_ASSIGN(Tensor t, need(w, name));
  if (t.rank() != 2) return make_error(ErrorCode::kInvalidFormat, name + ": a projection must be a matrix");
  auto q = cpu::quantize_rows(cpu::MatrixRef::of(t), format, pool);
  if (!q.ok()) return make_error(q.error().code, name + ": " + q.error().message);
  return upload_quantized(*q);
}

Result<DeviceTensor> upload_quantized(const cpu::RowQuantMatrix& q) {
  if (q.cols % 16 != 0 || q.rows <= 0)
    return make_error(ErrorCode::kUnsupported, "quantised weights on the GPU need a width that is a multiple of 16 (got " +
                                                   std::to_string(q.cols) + ")");
  DeviceTensor d;
  d.rows = q.rows;
  d.cols = q.cols;
  d.format = q.format;
  // The scales start on a 256-byte boundary, so any slice of whole rows of them is 16-byte aligned
  // (the persistent kernel's bulk copies).
  d.scales_offset = (q.codes.size() + 255) / 256 * 256;
  const size_t scale_bytes = q.scales.size() * sizeof(uint16_t);
  CHORUS_ASSIGN(d.buf, cuda::DeviceBuffer::alloc(d.scales_offset + scale_bytes));
  CHORUS_CUDA_TRY(cudaMemcpy(d.buf.data(), q.codes.data(), q.codes.size(), cudaMemcpyHostToDevice));
  CHORUS_CUDA_TRY(cudaMemcpy(static_cast<uint8_t*>(d.buf.data()) + d.scales_offset, q.scales.data(), scale_bytes,
                             cudaMemcpyHostToDevice));
  return d;
}

Result<DeviceTensor> upload_matrix(const Tensor& t) {
  DeviceTensor d;
  if (t.rank() == 2) {
    d.rows = t.dim(0);
    d.cols = t.dim(1);
  } else if (t.rank() == 1) {
    d.rows = 1;
    d.cols = t.dim(0);
  } else {
    return make_error(ErrorCode::kInternal, "upload_matrix: rank " + std::to_string(t.rank()));
  }
  const size_t n = static_cast<size_t>(d.rows * d.cols);
  CHORUS_ASSIGN(d.buf, cuda::DeviceBuffer::alloc(n * sizeof(uint16_t)));
  if (t.dtype() == DType::kBF16) {
    CHORUS_CUDA_TRY(cudaMemcpy(d.buf.data(), t.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    return d;
  }
  // Other float dtypes are rounded to bf16 once (the released checkpoints are bf16 already).
  std::vector<float> f(n);
  convert_to_f32(t.dtype(), t.data(), f.data(), n);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
  CHORUS_CUDA_TRY(cudaMemcpy(d.buf.data(), h.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
  return d;
}

Result<DeviceTensor> upload_vector_f32(const Tensor& t) {
  DeviceTensor d;
  d.rows = 1;
  d.cols = t.numel();
  const Tensor f = t.dtype() == DType::kF32 ? t : t.to_f32();
  CHORUS_ASSIGN(d.buf, cuda::DeviceBuffer::alloc(static_cast<size_t>(d.cols) * sizeof(float)));
  CHORUS_CUDA_TRY(cudaMemcpy(d.buf.data(), f.data(), static_cast<size_t>(d.cols) * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

Result<StackScratch> StackScratch::create(const Qwen3Dims& d, int64_t rows, bool fused_mlp) {
  StackScratch s;
  s.max_rows = rows;
  const int64_t qw = d.heads * d.head_dim, kvw = d.kv_heads * d.head_dim;
  const auto f = [&](int64_t width) { return static_cast<size_t>(rows * width) * sizeof(float); };
  CHORUS_ASSIGN(s.qkv, cuda::DeviceBuffer::alloc(f(qw + 2 * kvw)));
  CHORUS_ASSIGN(s.q, cuda::DeviceBuffer::alloc(f(qw)));
  CHORUS_ASSIGN(s.attn, cuda::DeviceBuffer::alloc(f(qw)));
  CHORUS_ASSIGN(s.mlp, cuda::DeviceBuffer::alloc(f(d.intermediate)));
  const int mlp_rows =
      fused_mlp ? static_cast<int>(std::min<int64_t>(rows, cuda::fused_mlp_max_rows(d.hidden, d.intermediate))) : 0;
  if (mlp_rows > 0) {
    CHORUS_ASSIGN(s.mlp_partial,
                  cuda::DeviceBuffer::alloc(cuda::fused_mlp_partial_floats(d.hidden, mlp_rows) * sizeof(float)));
  }
  s.mlp_rows = mlp_rows;
  CHORUS_ASSIGN(s.barrier, cuda::DeviceBuffer::alloc(2 * sizeof(unsigned)));
  return s;
}

Result<DeviceStack> DeviceStack::load(const Weights& w, const Qwen3Dims& d, std::span<const float> inv_freq,
                                      StackOptions options) {
  const cpu::WeightFormat f = options.weights;
  if (f == cpu::WeightFormat::kInt4)
    return make_error(ErrorCode::kUnsupported, "int4 is CPU only; on CUDA use int8 or fp8 (or bf16)");
  DeviceStack s;
  s.dims_ = d;
  s.weights_ = f;
  s.layers_.resize(static_cast<size_t>(d.layers));
  for (int64_t i = 0; i < d.layers; ++i) {
    const Weights lw = w.sub("layers." + std::to_string(i) + ".");
    Layer& L = s.layers_[static_cast<size_t>(i)];
    ThreadPool* pool = options.pool;
    CHORUS_ASSIGN(L.q, load_matrix(lw, "self_attn.q_proj.weight", f, pool));
    CHORUS_ASSIGN(L.k, load_matrix(lw, "self_attn.k_proj.weight", f, pool));
    CHORUS_ASSIGN(L.v, load_matrix(lw, "self_attn.v_proj.weight", f, pool));
    CHORUS_ASSIGN(L.o, load_matrix(lw, "self_attn.o_proj.weight", f, pool));
    CHORUS_ASSIGN(L.gate, load_matrix(lw, "mlp.gate_proj.weight", f, pool));
    CHORUS_ASSIGN(L.up, load_matrix(lw, "mlp.up_proj.weight", f, pool));
    CHORUS_ASSIGN(L.down, load_matrix(lw, "mlp.down_proj.weight", f, pool));
    for (const DeviceTensor* t : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) s.projection_bytes_ += t->buf.bytes();
    CHORUS_ASSIGN(L.in_norm, load_vector_f32(lw, "input_layernorm.weight"));
    CHORUS_ASSIGN(L.post_norm, load_vector_f32(lw, "post_attention_layernorm.weight"));
    if (lw.has("self_attn.q_norm.weight")) {
      CHORUS_ASSIGN(L.q_norm, load_vector_f32(lw, "self_attn.q_norm.weight"));
      CHORUS_ASSIGN(L.k_norm, load_vector_f32(lw, "self_attn.k_norm.weight"));
    }
    if (options.one_launch_mlp && f == cpu::WeightFormat::kBf16 && cuda::fused_mlp_supported(d.hidden, d.intermediate)) {
      const cuda::DeviceMatrix down = L.down.matrix();
      L.down_t.rows = down.cols;
      L.down_t.cols = down.rows;
      CHORUS_ASSIGN(L.down_t.buf, cuda::DeviceBuffer::alloc(L.down.buf.bytes()));
      CHORUS_TRY(cuda::transpose_matrix(down, L.down_t.buf.as<uint16_t>(), nullptr));
    }
    for (const DeviceTensor* t : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down, &L.in_norm, &L.post_norm, &L.q_norm,
                                  &L.k_norm, &L.down_t})
      s.bytes_ += t->buf.bytes();
  }
  if (!s.layers_.empty() && !s.layers_.front().down_t.empty()) {
    CHORUS_CUDA_TRY(cudaDeviceSynchronize());  // the transposes above ran on the default stream
  }
  std::vector<cuda::StackLayerWeights> table;
  for (const Layer& L : s.layers_) {
    cuda::StackLayerWeights t{L.q.bf16(), L.k.bf16(), L.v.bf16(), L.o.bf16(), L.gate.bf16(), L.up.bf16(),
                              L.down.bf16(), L.in_norm.f32(), L.post_norm.f32(),
                              L.q_norm.empty() ? nullptr : L.q_norm.f32(), L.k_norm.empty() ? nullptr : L.k_norm.f32()};
    if (f != cpu::WeightFormat::kBf16) {
      const DeviceTensor* m[7] = {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down};
      for (int j = 0; j < 7; ++j) {
        t.codes[j] = m[j]->codes();
        t.scales[j] = m[j]->scales();
      }
      t.q = t.k = t.v = t.o = t.gate = t.up = t.down = nullptr;
    }
    table.push_back(t);
  }
  CHORUS_ASSIGN(s.layer_table_, cuda::DeviceBuffer::alloc(table.size() * sizeof(cuda::StackLayerWeights)));
  CHORUS_CUDA_TRY(cudaMemcpy(s.layer_table_.data(), table.data(), table.size() * sizeof(cuda::StackLayerWeights),
                             cudaMemcpyHostToDevice));
  cuda::decode_stack_reserve();  // outside any graph capture; false only means the per-kernel path
  CHORUS_ASSIGN(s.final_norm_, load_vector_f32(w, "norm.weight"));
  std::vector<float> inv(static_cast<size_t>(d.head_dim / 2));
  if (inv_freq.empty()) {
    cpu::rope_inv_freq(static_cast<float>(d.rope_theta), d.head_dim, inv.data());
  } else if (inv_freq.size() == inv.size()) {
    inv.assign(inv_freq.begin(), inv_freq.end());
  } else {
    return make_error(ErrorCode::kInternal, "device stack: inv_freq needs head_dim / 2 values");
  }
  CHORUS_ASSIGN(s.inv_freq_, upload_vector_f32(Tensor::view(DType::kF32, {static_cast<int64_t>(inv.size())}, inv.data())));
  s.bytes_ += s.final_norm_.buf.bytes() + s.inv_freq_.buf.bytes();
  return s;
}

int64_t DeviceStack::max_linear_k() const {
  return std::max({dims_.hidden, dims_.heads * dims_.head_dim, dims_.intermediate});
}

int64_t DeviceStack::max_dequant() const {
  if (weights_ == cpu::WeightFormat::kBf16) return 0;
  const int64_t H = dims_.hidden, qw = dims_.heads * dims_.head_dim, I = dims_.intermediate;
  return std::max({qw * H, dims_.kv_heads * dims_.head_dim * H, H * qw, I * H, H * I});
}

int64_t DeviceStack::max_linear_n_total() const {
  return std::max({dims_.heads * dims_.head_dim + 2 * dims_.kv_heads * dims_.head_dim, 2 * dims_.intermediate,
                   dims_.hidden});
}

Result<bool> DeviceStack::forward_persistent(float* h, float* out, const cuda::RowMap& rows, const KvCacheRef& kv,
                                             StackScratch& sc, cudaStream_t s, bool bf16, bool input_rounded) const {
  const Qwen3Dims& d = dims_;
  if (rows.rows != 1 || !rows.decode) return false;
  cuda::DecodeStackArgs a;
  a.layers = layer_table_.as<const cuda::StackLayerWeights>();
  a.n_layers = static_cast<int>(d.layers);
  a.hidden = static_cast<int>(d.hidden);
  a.q_heads = static_cast<int>(d.heads);
  a.kv_heads = static_cast<int>(d.kv_heads);
  a.head_dim = static_cast<int>(d.head_dim);
  a.intermediate = static_cast<int>(d.intermediate);
  a.eps = static_cast<float>(d.rms_eps);
  a.scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim));
  a.inv_freq = inv_freq_.f32();
  const cuda::KvLayer l0 = kv.layer(0);
  a.kv_base = kv.base;
  a.kv_layer_floats = kv.layer_floats();
  a.kv_seq_stride = l0.seq_stride;
  a.kv_capacity = l0.capacity;
  a.kv_pages = kv.pages;
  a.kv_page_shift = l0.page_shift;
  a.seq = rows.seq;
  a.pos = rows.pos;
  a.h = h;
  a.qkv = sc.qkv.as<float>();
  a.attn = sc.attn.as<float>();
  a.mlp = sc.mlp.as<float>();
  a.barrier = sc.barrier.as<unsigned>();
  a.bf16 = bf16;
  a.weights = weights_;
  if (!a.barrier || !cuda::decode_stack_applies(a)) return false;
  if (bf16 && !input_rounded) CHORUS_TRY(cuda::round_bf16(h, d.hidden, s));
  CHORUS_TRY(cuda::decode_stack(a, s));
  if (out) CHORUS_TRY(cuda::rms_norm(h, final_norm_.f32(), out, 1, d.hidden, a.eps, s, bf16));
  return true;
}

namespace {
constexpr size_t kMaxAttentionPrefetch = size_t{16} << 20;
}  // namespace

void DeviceStack::prefetch_attention(int64_t layer, cuda::L2Prefetch (&to)[4]) const {
  if (layer < 0 || layer >= dims_.layers) return;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  const DeviceTensor* parts[4] = {&L.q, &L.k, &L.v, &L.o};
  cuda::L2Prefetch ranges[4];
  size_t total = 0;
  for (int i = 0; i < 4; ++i) {
    const cuda::DeviceMatrix w = parts[i]->matrix();
    // A quantised matrix's buffer holds its codes and then its scales: the whole buffer.
    ranges[i] = w.quantized() ? cuda::L2Prefetch{parts[i]->buf.data(), parts[i]->buf.bytes()}
                              : cuda::L2Prefetch{w.data, static_cast<size_t>(w.rows * w.cols) * sizeof(uint16_t)};
    total += ranges[i].bytes;
  }
  // Measured on the H200: Breeze's depth layers (5 MB) gain, its backbone's (24 MB) lose as much: a
  // large prefetch competes with the running launch's own reads and does not stay in L2 until used.
  if (total > kMaxAttentionPrefetch) return;
  for (int i = 0; i < 4; ++i) to[i] = ranges[i];
}

Status DeviceStack::forward(float* h, float* out, const cuda::RowMap& rows, const KvCacheRef& kv, StackScratch& sc,
                            cuda::LinearWorkspace& ws, cudaStream_t s, bool bf16, bool input_rounded) const {
  const Qwen3Dims& d = dims_;
  const int64_t R = rows.rows;
  if (R <= 0) return ok_status();
  if (R > sc.max_rows) return make_error(ErrorCode::kInternal, "device stack: scratch too small");
  // every_row_tensor: a row's results must not depend on the row count, so no one-row kernels.
  const bool any_rows = !ws.every_row_tensor();
  if (any_rows) {
    CHORUS_ASSIGN(const bool done, forward_persistent(h, out, rows, kv, sc, s, bf16, input_rounded));
    if (done) return ok_status();
  }
  const int64_t H = d.hidden, D = d.head_dim, qw = d.heads * D, kvw = d.kv_heads * D, I = d.intermediate;
  const int64_t ld_qkv = qw + 2 * kvw;
  const float eps = static_cast<float>(d.rms_eps), scale = 1.0f / std::sqrt(static_cast<float>(D));
  const cuda::HeadShape shape{d.heads, d.kv_heads, D};
  float* qkv = sc.qkv.as<float>();
  float* q = sc.q.as<float>();
  float* attn = sc.attn.as<float>();
  float* mlp = sc.mlp.as<float>();
  if (bf16 && !input_rounded) CHORUS_TRY(cuda::round_bf16(h, R * H, s));
  for (int64_t li = 0; li < d.layers; ++li) {
    const Layer& L = layers_[static_cast<size_t>(li)];
    cuda::LinearArgs a;
    a.x = h;
    a.ldx = H;
    a.M = R;
    a.norm_weight = L.in_norm.f32();
    a.norm_eps = eps;
    a.out[0] = {L.q.matrix(), nullptr, qkv, ld_qkv};
    a.out[1] = {L.k.matrix(), nullptr, qkv + qw, ld_qkv};
    a.out[2] = {L.v.matrix(), nullptr, qkv + qw + kvw, ld_qkv};
    a.outputs = 3;
    a.bf16 = bf16;
    CHORUS_TRY(cuda::linear(a, &ws, s));
    const cuda::KvLayer layer = kv.layer(li);
    const float* qn = L.q_norm.empty() ? nullptr : L.q_norm.f32();
    const float* kn = L.k_norm.empty() ? nullptr : L.k_norm.f32();
    if (rows.decode) {
      CHORUS_TRY(
          cuda::attention_decode(qkv, ld_qkv, shape, qn, kn, eps, inv_freq_.f32(), scale, rows, layer, attn, s, bf16));
    } else {
      CHORUS_TRY(cuda::qk_norm_rope_store(qkv, ld_qkv, shape, qn, kn, eps, inv_freq_.f32(), rows, layer, q, s, bf16));
      CHORUS_TRY(cuda::attention(q, shape, scale, rows, layer, attn, s, bf16));
    }

    cuda::LinearArgs o;
    o.x = attn;
    o.ldx = qw;
    o.M = R;
    o.out[0] = {L.o.matrix(), nullptr, h, H};
    o.epilogue = cuda::Epilogue::kAdd;
    o.bf16 = bf16;
    CHORUS_TRY(cuda::linear(o, &ws, s));

    if (any_rows && R <= sc.mlp_rows && rows.decode && !L.down_t.empty()) {
      cuda::FusedMlpArgs m;
      m.h = h;
      m.rows = static_cast<int>(R);
      m.norm_weight = L.post_norm.f32();
      m.norm_eps = eps;
      m.gate = L.gate.matrix();
      m.up = L.up.matrix();
      m.down_t = L.down_t.matrix();
      m.partial = sc.mlp_partial.as<float>();
      m.bf16 = bf16;
      prefetch_attention(li + 1, m.prefetch);  // as the down launch below
      CHORUS_TRY(cuda::fused_mlp(m, s));
      continue;
    }
    cuda::LinearArgs g;
    g.x = h;
    g.ldx = H;
    g.M = R;
    g.norm_weight = L.post_norm.f32();
    g.norm_eps = eps;
    g.out[0] = {L.gate.matrix(), nullptr, mlp, I};
    g.out[1] = {L.up.matrix(), nullptr, mlp, I};
    g.outputs = 2;
    g.epilogue = cuda::Epilogue::kSwiGlu;
    g.bf16 = bf16;
    CHORUS_TRY(cuda::linear(g, &ws, s));

    cuda::LinearArgs dn;
    dn.x = mlp;
    dn.ldx = I;
    dn.M = R;
    dn.out[0] = {L.down.matrix(), nullptr, h, H};
    dn.epilogue = cuda::Epilogue::kAdd;
    dn.bf16 = bf16;
    prefetch_attention(li + 1, dn.prefetch);  // the next layer's first launches are latency-bound
    CHORUS_TRY(cuda::linear(dn, &ws, s));
  }
  return out ? cuda::rms_norm(h, final_norm_.f32(), out, R, H, eps, s, bf16) : ok_status();
}

Result<cuda::DeviceBuffer> project_rows(const cuda::DeviceMatrix& table, const cuda::DeviceMatrix& proj,
                                        const float* bias, int64_t out_rows) {
  if (out_rows < table.rows || table.cols != proj.cols)
    return make_error(ErrorCode::kInternal, "project_rows: table and projection do not match");
  CHORUS_ASSIGN(cuda::DeviceBuffer ids, cuda::DeviceBuffer::alloc(static_cast<size_t>(table.rows) * sizeof(int32_t)));
  CHORUS_ASSIGN(cuda::DeviceBuffer rows,
                cuda::DeviceBuffer::alloc(static_cast<size_t>(table.rows * table.cols) * sizeof(float)));
  CHORUS_ASSIGN(cuda::DeviceBuffer out, cuda::DeviceBuffer::alloc(static_cast<size_t>(out_rows * proj.rows) * sizeof(float)));
  std::vector<int32_t> iota(static_cast<size_t>(table.rows));
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int32_t>(i);
  CHORUS_CUDA_TRY(cudaMemcpy(ids.data(), iota.data(), iota.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  CHORUS_TRY(cuda::embedding(table, ids.as<int32_t>(), table.rows, rows.as<float>(), nullptr));
  cuda::LinearArgs p;
  p.x = rows.as<float>();
  p.ldx = table.cols;
  p.M = table.rows;
  p.out[0] = {proj, bias, out.as<float>(), proj.rows};
  CHORUS_TRY(cuda::linear(p, nullptr, nullptr, cuda::kLinearGemv));
  CHORUS_CUDA_TRY(cudaDeviceSynchronize());
  return out;
}

}  // namespace chorus::nn::gpu

#endif  // CHORUS_HAVE_CUDA
