// CudaDecoder: loading (weights → f32 device tensors), stream states, code checks, flush. decode
// and decode_batch are in decoder_batch_cuda.cpp, the per-step pipeline in decoder_forward_cuda.cpp.
#include "models/codec/decoder_cuda.h"

#include "models/codec/codec_folder.h"

#ifndef CHORUS_HAVE_CUDA

namespace chorus::codec {

namespace detail {
struct CudaDecoderModel {};
struct StreamHistory {};
struct Workspaces {};
}  // namespace detail

bool cuda_decoder_built() { return false; }
CudaDecoderState::CudaDecoderState() = default;
CudaDecoderState::~CudaDecoderState() = default;
CudaDecoderState::CudaDecoderState(CudaDecoderState&&) noexcept = default;
CudaDecoderState& CudaDecoderState::operator=(CudaDecoderState&&) noexcept = default;
int64_t CudaDecoderState::frames() const { return 0; }
bool CudaDecoderState::finished() const { return true; }

namespace {
Error no_cuda() { return make_error(ErrorCode::kUnsupported, "this build has no CUDA backend (configure with -DCHORUS_CUDA=ON)"); }
}  // namespace

Result<CudaDecoder> CudaDecoder::load(const io::Checkpoint&, const CodecConfig&, CodecPrecision) { return no_cuda(); }
const CodecConfig& CudaDecoder::config() const {
  static const CodecConfig none;
  return none;
}
CodecPrecision CudaDecoder::precision() const { return CodecPrecision::kF32; }
size_t CudaDecoder::weight_bytes() const { return 0; }
size_t CudaDecoder::state_bytes(int64_t) const { return 0; }
Result<CudaDecoderState> CudaDecoder::new_state(int64_t) const { return no_cuda(); }
Status CudaDecoder::reset(CudaDecoderState&) const { return no_cuda(); }
Status CudaDecoder::validate_codes(const int32_t*, int64_t) const { return no_cuda(); }
Status CudaDecoder::decode(CudaDecoderState&, const int32_t*, int64_t, std::vector<float>&) const { return no_cuda(); }
Status CudaDecoder::decode_batch(std::span<CudaDecoderState* const>, std::span<const int32_t* const>,
                                 std::span<const int64_t>, std::span<std::vector<float>* const>) const {
  return no_cuda();
}
Status CudaDecoder::flush(CudaDecoderState&, std::vector<float>&) const { return no_cuda(); }
Result<CudaDecoder> load_cuda_codec(const std::string&, CodecPrecision) { return no_cuda(); }

}  // namespace chorus::codec

#else  // CHORUS_HAVE_CUDA

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "models/codec/decoder.h"
#include "models/codec/decoder_model_cuda.h"
#include "io/weight_table.h"
#include "runtime/cpu/kernels.h"

namespace chorus::codec {

using detail::CudaDecoderModel;
using detail::StreamHistory;
using detail::DevConv;
using detail::DevConvT;
using detail::Snake;

bool cuda_decoder_built() { return true; }

CudaDecoderState::CudaDecoderState() = default;
CudaDecoderState::~CudaDecoderState() = default;
CudaDecoderState::CudaDecoderState(CudaDecoderState&&) noexcept = default;
CudaDecoderState& CudaDecoderState::operator=(CudaDecoderState&&) noexcept = default;
int64_t CudaDecoderState::frames() const { return impl_ ? impl_->frames : 0; }
bool CudaDecoderState::finished() const { return !impl_ || impl_->finished; }

namespace {

constexpr int64_t kDilations[3] = {1, 3, 9};

// Uploads host tensors into device buffers the model owns, and tracks the history layout.
class Builder {
 public:
  Builder(const io::Checkpoint& ckpt, CudaDecoderModel& m) : ckpt_(ckpt), m_(m) {}

  template <class T>
  Result<const T*> upload(const std::vector<T>& v) {
    if (v.empty()) return static_cast<const T*>(nullptr);
    CHORUS_ASSIGN(auto buf, cuda::DeviceBuffer::alloc(v.size() * sizeof(T)));
    CHORUS_CUDA_TRY(cudaMemcpy(buf.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    m_.weight_bytes += buf.bytes();
    const T* p = buf.template as<const T>();
    m_.owned.push_back(std::move(buf));
    return p;
  }
  // The tensor as f32 (any stored float dtype); empty when absent (optional biases).
  std::vector<float> host(const std::string& name) const {
    const Tensor t = Weights(ckpt_).f32(name);
    if (t.empty()) return {};
    return std::vector<float>(t.f32(), t.f32() + t.numel());
  }
  Result<const float*> tensor(const std::string& name) { return upload(host(name)); }
  // The tensor rounded to bf16 (as cvt.rn on the device would), for codec_ops::gemm_bf16_operands;
  // with `rows` > 0, the [rows, cols] matrix stored transposed ([cols, rows]).
  Result<const uint16_t*> tensor_bf16(const std::string& name, int64_t rows = 0) {
    const std::vector<float> v = host(name);
    std::vector<uint16_t> h(v.size());
    const size_t r = rows > 0 ? static_cast<size_t>(rows) : 1, cols = v.size() / r;
    for (size_t i = 0; i < v.size(); ++i) h[rows > 0 ? i % cols * r + i / cols : i] = f32_to_bf16(v[i]);
    return upload(h);
  }
  Result<Snake> snake(const std::string& name) {
    std::vector<float> a = host(name + ".alpha"), b = host(name + ".beta");
    for (float& x : a) x = std::exp(x);
    for (float& x : b) x = 1.0f / (std::exp(x) + 1e-9f);
    Snake s;
    CHORUS_ASSIGN(s.alpha, upload(a));
    CHORUS_ASSIGN(s.inv_beta, upload(b));
    return s;
  }
  Result<DevConv> conv(const std::string& name, int64_t cin, int64_t cout, int64_t kernel, int64_t dilation = 1) {
    DevConv c;
    c.cin = cin;
    c.cout = cout;
    c.kernel = kernel;
    c.dilation = dilation;
    CHORUS_ASSIGN(c.w, tensor(name + ".weight"));
    if (m_.precision == CodecPrecision::kBf16) {
      CHORUS_ASSIGN(c.w16, tensor_bf16(name + ".weight"));
    }
    CHORUS_ASSIGN(c.b, tensor(name + ".bias"));
    c.hist = take(static_cast<size_t>(cin * c.history()));
    return c;
  }
  Result<DevConvT> conv_t(const std::string& name, int64_t cin, int64_t cout, int64_t kernel, int64_t stride) {
    if (kernel < stride || kernel > 2 * stride)
      return make_error(ErrorCode::kUnsupported, name + ": the GPU decoder needs stride <= kernel <= 2·stride");
    DevConvT c;
    c.cin = cin;
    c.cout = cout;
    c.kernel = kernel;
    c.stride = stride;
    CHORUS_ASSIGN(c.w, tensor(name + ".weight"));
    if (m_.precision == CodecPrecision::kBf16) {
      CHORUS_ASSIGN(c.w16t, tensor_bf16(name + ".weight", cin));
    }
    CHORUS_ASSIGN(c.b, tensor(name + ".bias"));
    c.hist = take(kernel > stride ? static_cast<size_t>(cout * kernel) : 0);
    return c;
  }
  // Reserves n floats of stream history (64-float aligned).
  size_t take(size_t n) {
    const size_t at = m_.hist_floats;
    m_.hist_floats += (n + 63) / 64 * 64;
    return at;
  }

 private:
  const io::Checkpoint& ckpt_;
  CudaDecoderModel& m_;
};

Status build(const io::Checkpoint& ckpt, CudaDecoderModel& m) {
  const DecoderConfig& d = m.config.decoder;
  const auto& t = d.transformer;
  Builder b(ckpt, m);
  const std::string p = "decoder.";

  // RVQ: codebook vectors as the CPU computes them, one table per codebook.
  const int64_t dim = d.codebook_dim / 2;
  std::vector<float> tables;
  tables.reserve(static_cast<size_t>(d.num_quantizers * d.codebook_size * dim));
  for (int64_t k = 0; k < d.num_quantizers; ++k) {
    const bool first = k < d.num_semantic_quantizers;
    const int64_t idx = first ? k : k - d.num_semantic_quantizers;
    const std::string q = p + "quantizer." + (first ? "rvq_first" : "rvq_rest") + ".vq.layers." +
                          std::to_string(idx) + "._codebook.";
    const std::vector<float> sum = b.host(q + "embedding_sum"), usage = b.host(q + "cluster_usage");
    for (int64_t i = 0; i < d.codebook_size; ++i) {
      const float u = std::max(usage[static_cast<size_t>(i)], 1e-5f);
      for (int64_t j = 0; j < dim; ++j) tables.push_back(sum[static_cast<size_t>(i * dim + j)] / u);
    }
  }
  CHORUS_ASSIGN(m.rvq_tables, b.upload(tables));
  CHORUS_ASSIGN(m.proj_first, b.tensor(p + "quantizer.rvq_first.output_proj.weight"));
  CHORUS_ASSIGN(m.proj_rest, b.tensor(p + "quantizer.rvq_rest.output_proj.weight"));
  CHORUS_ASSIGN(m.pre_conv, b.conv(p + "pre_conv.conv", d.codebook_dim, d.latent_dim, 3));

  const std::string tp = p + "pre_transformer.";
  CHORUS_ASSIGN(m.input_proj, b.tensor(tp + "input_proj.weight"));
  CHORUS_ASSIGN(m.input_b, b.tensor(tp + "input_proj.bias"));
  CHORUS_ASSIGN(m.output_proj, b.tensor(tp + "output_proj.weight"));
  CHORUS_ASSIGN(m.output_b, b.tensor(tp + "output_proj.bias"));
  CHORUS_ASSIGN(m.final_norm, b.tensor(tp + "norm.weight"));
  std::vector<float> inv_freq(static_cast<size_t>(t.head_dim / 2));
  cpu::rope_inv_freq(static_cast<float>(t.rope_theta), t.head_dim, inv_freq.data());
  CHORUS_ASSIGN(m.inv_freq, b.upload(inv_freq));
  for (int64_t i = 0; i < t.layers; ++i) {
    const std::string l = tp + "layers." + std::to_string(i) + ".";
    detail::DevLayer layer{};
    CHORUS_ASSIGN(layer.input_norm, b.tensor(l + "input_layernorm.weight"));
    CHORUS_ASSIGN(layer.post_norm, b.tensor(l + "post_attention_layernorm.weight"));
    CHORUS_ASSIGN(layer.attn_scale, b.tensor(l + "self_attn_layer_scale.scale"));
    CHORUS_ASSIGN(layer.mlp_scale, b.tensor(l + "mlp_layer_scale.scale"));
    auto stack = [&](std::initializer_list<const char*> names) {
      std::vector<float> all;
      for (const char* n : names) {
        const std::vector<float> w = b.host(l + n);
        all.insert(all.end(), w.begin(), w.end());
      }
      return all;
    };
    CHORUS_ASSIGN(layer.qkv, b.upload(stack({"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight"})));
    CHORUS_ASSIGN(layer.o, b.tensor(l + "self_attn.o_proj.weight"));
    CHORUS_ASSIGN(layer.gate_up, b.upload(stack({"mlp.gate_proj.weight", "mlp.up_proj.weight"})));
    CHORUS_ASSIGN(layer.down, b.tensor(l + "mlp.down_proj.weight"));
    m.layers.push_back(layer);
  }

  const int64_t L = d.latent_dim;
  for (size_t i = 0; i < d.upsampling_ratios.size(); ++i) {
    const std::string u = p + "upsample." + std::to_string(i) + ".";
    const int64_t r = d.upsampling_ratios[i];
    detail::DevUpsample s{};
    CHORUS_ASSIGN(s.up, b.conv_t(u + "0.conv", L, L, r, r));
    CHORUS_ASSIGN(s.dw, b.conv(u + "1.dwconv.conv", L, L, 7));
    CHORUS_ASSIGN(s.norm_w, b.tensor(u + "1.norm.weight"));
    CHORUS_ASSIGN(s.norm_b, b.tensor(u + "1.norm.bias"));
    CHORUS_ASSIGN(s.pw1, b.tensor(u + "1.pwconv1.weight"));
    CHORUS_ASSIGN(s.pw1_b, b.tensor(u + "1.pwconv1.bias"));
    CHORUS_ASSIGN(s.pw2, b.tensor(u + "1.pwconv2.weight"));
    CHORUS_ASSIGN(s.pw2_b, b.tensor(u + "1.pwconv2.bias"));
    CHORUS_ASSIGN(s.gamma, b.tensor(u + "1.gamma"));
    m.upsample.push_back(s);
  }

  const std::string vp = p + "decoder.";
  CHORUS_ASSIGN(m.conv_in, b.conv(vp + "0.conv", L, d.decoder_dim, 7));
  int64_t ch = d.decoder_dim;
  for (size_t i = 0; i < d.upsample_rates.size(); ++i) {
    const std::string blk = vp + std::to_string(i + 1) + ".block.";
    const int64_t out = ch / 2, rate = d.upsample_rates[i];
    detail::DevBlock block{};
    CHORUS_ASSIGN(block.act, b.snake(blk + "0"));
    CHORUS_ASSIGN(block.up, b.conv_t(blk + "1.conv", ch, out, 2 * rate, rate));
    for (int k = 0; k < 3; ++k) {
      const std::string ru = blk + std::to_string(k + 2) + ".";
      auto& unit = block.units[static_cast<size_t>(k)];
      CHORUS_ASSIGN(unit.act1, b.snake(ru + "act1"));
      CHORUS_ASSIGN(unit.conv1, b.conv(ru + "conv1.conv", out, out, 7, kDilations[k]));
      CHORUS_ASSIGN(unit.act2, b.snake(ru + "act2"));
      CHORUS_ASSIGN(unit.conv2, b.conv(ru + "conv2.conv", out, out, 1));
    }
    m.blocks.push_back(block);
    ch = out;
  }
  const size_t nb = d.upsample_rates.size();
  CHORUS_ASSIGN(m.act_out, b.snake(vp + std::to_string(nb + 1)));
  CHORUS_ASSIGN(m.conv_out, b.conv(vp + std::to_string(nb + 2) + ".conv", ch, 1, 7));
  return ok_status();
}

template <class T>
Result<cuda::DeviceBuffer> alloc_n(size_t n) {
  return cuda::DeviceBuffer::alloc(std::max<size_t>(1, n) * sizeof(T));
}

}  // namespace

Result<CudaDecoder> CudaDecoder::load(const io::Checkpoint& ckpt, const CodecConfig& config, CodecPrecision precision) {
  // The CPU loader checks the config invariants and every decoder tensor's name, shape and dtype;
  // its views cost nothing to build and are dropped.
  CHORUS_TRY(Decoder::load(ckpt, config));
  auto m = std::make_shared<CudaDecoderModel>();
  m->config = config;
  m->precision = precision;
  CHORUS_TRY(build(ckpt, *m));
  CudaDecoder dec;
  dec.model_ = std::move(m);
  dec.work_ = std::make_shared<detail::Workspaces>();
  return dec;
}

const CodecConfig& CudaDecoder::config() const { return model_->config; }
CodecPrecision CudaDecoder::precision() const { return model_->precision; }
size_t CudaDecoder::weight_bytes() const { return model_->weight_bytes; }

namespace {

size_t kv_floats(const CudaDecoderModel& m, int64_t block_frames) {
  const auto& d = m.config.decoder;
  const auto& t = d.transformer;
  return static_cast<size_t>(t.layers) * 2 * static_cast<size_t>(d.sliding_window - 1 + block_frames) *
         static_cast<size_t>(t.kv_heads * t.head_dim);
}

}  // namespace

size_t CudaDecoder::state_bytes(int64_t block_frames) const {
  return (2 * std::max<size_t>(1, model_->hist_floats) + kv_floats(*model_, block_frames)) * sizeof(float);
}

Result<CudaDecoderState> CudaDecoder::new_state(int64_t block_frames) const {
  if (block_frames < 1 || block_frames > 256)
    return make_error(ErrorCode::kOutOfRange, "GPU decoder block size must be in [1, 256] frames");
  const CudaDecoderModel& m = *model_;
  auto s = std::make_unique<StreamHistory>();
  s->model = model_;
  s->block = block_frames;
  for (auto& h : s->hist) {
    CHORUS_ASSIGN(h, alloc_n<float>(m.hist_floats));
    CHORUS_CUDA_TRY(cudaMemset(h.data(), 0, h.bytes()));
  }
  s->kv_capacity = m.config.decoder.sliding_window - 1 + block_frames;
  CHORUS_ASSIGN(s->kv, alloc_n<float>(kv_floats(m, block_frames)));
  // The zero fills ran on this thread's default stream; the decoder's streams do not wait for it.
  CHORUS_CUDA_TRY(cudaStreamSynchronize(nullptr));
  CudaDecoderState state;
  state.impl_ = std::move(s);
  return state;
}

Status CudaDecoder::reset(CudaDecoderState& state) const {
  StreamHistory* s = state.impl_.get();
  if (!s || s->model != model_) return make_error(ErrorCode::kInvalidArgument, "decoder state was not made by this decoder");
  // Only the histories need zeros: ring KV rows are always written before a query can see them.
  // As in new_state, the fills run on this thread's default stream, and only it is waited for (not
  // the whole device: the decoder's own streams do not wait for it, and no decode of this state is
  // running, since decode and decode_batch return after their work).
  for (auto& h : s->hist) CHORUS_CUDA_TRY(cudaMemset(h.data(), 0, h.bytes()));
  CHORUS_CUDA_TRY(cudaStreamSynchronize(nullptr));
  s->parity = 0;
  s->next_pos = s->frames = 0;
  s->finished = s->broken = false;
  return ok_status();
}

Status CudaDecoder::validate_codes(const int32_t* codes, int64_t frames) const {
  if (frames < 0) return make_error(ErrorCode::kInvalidArgument, "negative frame count");
  if (frames > 0 && codes == nullptr) return make_error(ErrorCode::kInvalidArgument, "no codes given");
  const int64_t Q = num_quantizers(), size = codebook_size();
  for (int64_t t = 0; t < frames; ++t)
    for (int64_t k = 0; k < Q; ++k) {
      const int32_t c = codes[t * Q + k];
      if (c < 0 || c >= size)
        return make_error(ErrorCode::kOutOfRange, "frame " + std::to_string(t) + ", codebook " + std::to_string(k) +
                                                      ": code " + std::to_string(c) + " is outside [0, " +
                                                      std::to_string(size - 1) + "]");
    }
  return ok_status();
}

Status CudaDecoder::flush(CudaDecoderState& state, std::vector<float>&) const {
  StreamHistory* s = state.impl_.get();
  if (!s || s->model != model_) return make_error(ErrorCode::kInvalidArgument, "decoder state was not made by this decoder");
  s->finished = true;  // nothing is held back (as Decoder::kHeldBackSamples)
  return ok_status();
}

Result<CudaDecoder> load_cuda_codec(const std::string& dir, CodecPrecision precision) {
  CHORUS_ASSIGN(std::string codec_dir, find_codec_dir(dir));
  CHORUS_ASSIGN(CodecConfig config, load_codec_config((std::filesystem::path(codec_dir) / "config.json").string()));
  CHORUS_ASSIGN(io::Checkpoint ckpt, io::Checkpoint::open_dir(codec_dir, "model"));
  return CudaDecoder::load(ckpt, config, precision);
}

}  // namespace chorus::codec

#endif  // CHORUS_HAVE_CUDA
