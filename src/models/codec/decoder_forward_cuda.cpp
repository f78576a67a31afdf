// One step of the GPU decoder (n frames → n·1920 samples), the same stages as the CPU pipeline
// (decoder.cpp): RVQ → pre_conv → transformer → upsample stages → vocoder → clamp. Matrix products
// go through cuBLAS SGEMM (f32, no TF32); convolutions are im2col + SGEMM with their streaming
// histories read from hist[parity] and written to hist[1 − parity] by the im2col kernels.
#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <cmath>

#include "models/codec/decoder_model_cuda.h"
#include "runtime/cuda/ops.h"

namespace chorus::codec::detail {

namespace ops = cuda::codec_ops;

ScratchPlan scratch_plan(const CudaDecoderModel& m, int64_t block) {
  const auto& d = m.config.decoder;
  const auto& t = d.transformer;
  ScratchPlan p;
  auto act = [&](int64_t v) { p.act = std::max(p.act, static_cast<size_t>(v)); };
  auto col = [&](int64_t v) { p.col = std::max(p.col, static_cast<size_t>(v)); };
  auto z = [&](int64_t v) { p.z = std::max(p.z, static_cast<size_t>(v)); };
  const int64_t L = d.latent_dim;
  act(block * d.codebook_dim);
  act(block * L);
  col(block * d.codebook_dim * 3);
  int64_t steps = block;
  for (const DevUpsample& u : m.upsample) {
    z(u.up.cout * u.up.kernel * steps);
    steps *= u.up.stride;
    act(4 * L * steps);
  }
  act(m.conv_in.cout * steps);
  col(m.conv_in.cin * m.conv_in.kernel * steps);
  for (const DevBlock& b : m.blocks) {
    z(b.up.cout * b.up.kernel * steps);
    steps *= b.up.stride;
    act(b.up.cout * steps);
    for (const DevResidualUnit& u : b.units) col(u.conv1.cin * u.conv1.kernel * steps);
  }
  col(m.conv_out.cin * m.conv_out.kernel * steps);
  const int64_t widest = std::max({t.hidden, (t.heads + 2 * t.kv_heads) * t.head_dim, 2 * t.intermediate, L});
  p.rows = static_cast<size_t>(block * widest);
  return p;
}

namespace {

struct Ctx {
  const CudaDecoderModel& m;
  CudaStreamState& s;
  cudaStream_t st;
  cublasHandle_t h;
  const float* hin;
  float* hout;
};

float* F(const cuda::DeviceBuffer& b) { return b.as<float>(); }

// Causal conv of channels-first x [cin, n] (element (c, t) at x[c·xcs + t·xts]) → y [cout, n]
// without its bias (the caller adds it, usually fused into the next element-wise op). `pre`:
// SnakeBeta applied to the input first.
Status conv(const Ctx& c, const DevConv& cv, const float* x, int64_t xcs, int64_t xts, int64_t n, Snake pre,
            float* y) {
  const float* in = x;
  int64_t ld = xcs;
  if (cv.kernel > 1 || pre.alpha || xts != 1) {
    CHORUS_TRY(ops::im2col_causal(c.hin + cv.hist, c.hout + cv.hist, x, xcs, xts, cv.cin, n, cv.kernel,
                                  cv.dilation, pre, F(c.s.col), c.st));
    in = F(c.s.col);
    ld = n;
  }
  return ops::sgemm(c.h, false, false, cv.cout, n, cv.cin * cv.kernel, 1.0f, cv.w, cv.cin * cv.kernel, in, ld, 0.0f,
                    y, n);
}

// Transposed conv of channels-first x [cin, n] → y [cout, n·stride] (bias included).
Status conv_t(const Ctx& c, const DevConvT& cv, const float* x, int64_t n, float* y) {
  const int64_t rows = cv.cout * cv.kernel;
  CHORUS_TRY(ops::sgemm(c.h, true, false, rows, n, cv.cin, 1.0f, cv.w, rows, x, n, 0.0f, F(c.s.z), n));
  const bool overlap = cv.kernel > cv.stride;
  return ops::transposed_conv_output(F(c.s.z), overlap ? c.hin + cv.hist : nullptr,
                                     overlap ? c.hout + cv.hist : nullptr, cv.cout, n, cv.kernel, cv.stride, cv.b, y,
                                     c.st);
}

Status add_bias(const Ctx& c, float* x, const float* bias, int64_t channels, int64_t steps, bool time_major) {
  if (!bias) return ok_status();
  ops::ChannelOp op;
  op.x = op.y = x;
  op.xcs = op.ycs = time_major ? 1 : steps;
  op.xts = op.yts = time_major ? channels : 1;
  op.channels = channels;
  op.steps = steps;
  op.bias = bias;
  return ops::channel_op(op, c.st);
}

// x cf [L, n] → y cf [L, n] through input_proj, the layers, the final norm and output_proj.
Status transformer(const Ctx& c, const float* x, int64_t n, float* y) {
  const auto& d = c.m.config.decoder;
  const auto& t = d.transformer;
  const int64_t H = t.hidden, D = t.head_dim, qd = t.heads * D, kvd = t.kv_heads * D, L = d.latent_dim;
  const int64_t qkvd = qd + 2 * kvd, I = t.intermediate;
  const float eps = static_cast<float>(t.rms_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  CudaStreamState& s = c.s;
  float* h = F(s.h);
  CHORUS_TRY(ops::sgemm(c.h, true, true, n, H, L, 1.0f, x, n, c.m.input_proj, L, 0.0f, h, H));
  CHORUS_TRY(add_bias(c, h, c.m.input_b, H, n, true));
  const size_t ring = static_cast<size_t>(s.kv_capacity * kvd);
  for (size_t i = 0; i < c.m.layers.size(); ++i) {
    const DevLayer& l = c.m.layers[i];
    const ops::KvRing kv{F(s.kv) + 2 * i * ring, F(s.kv) + (2 * i + 1) * ring, s.kv_capacity};
    CHORUS_TRY(cuda::rms_norm(h, l.input_norm, F(s.xn), n, H, eps, c.st));
    CHORUS_TRY(ops::sgemm(c.h, false, true, n, qkvd, H, 1.0f, F(s.xn), H, l.qkv, H, 0.0f, F(s.qkv), qkvd));
    CHORUS_TRY(ops::rope_store(F(s.qkv), n, t.heads, t.kv_heads, D, c.m.inv_freq, s.next_pos, kv, F(s.q), c.st));
    CHORUS_TRY(ops::window_attention(F(s.q), n, t.heads, t.kv_heads, D, s.next_pos, d.sliding_window, scale, kv,
                                     F(s.attn), c.st));
    CHORUS_TRY(ops::sgemm(c.h, false, true, n, H, qd, 1.0f, F(s.attn), qd, l.o, qd, 0.0f, F(s.proj), H));
    CHORUS_TRY(ops::scaled_add(h, F(s.proj), l.attn_scale, n, H, c.st));
    CHORUS_TRY(cuda::rms_norm(h, l.post_norm, F(s.xn), n, H, eps, c.st));
    CHORUS_TRY(ops::sgemm(c.h, false, true, n, 2 * I, H, 1.0f, F(s.xn), H, l.gate_up, H, 0.0f, F(s.gate_up), 2 * I));
    CHORUS_TRY(ops::swiglu_rows(F(s.gate_up), n, I, F(s.inter), c.st));
    CHORUS_TRY(ops::sgemm(c.h, false, true, n, H, I, 1.0f, F(s.inter), I, l.down, I, 0.0f, F(s.proj), H));
    CHORUS_TRY(ops::scaled_add(h, F(s.proj), l.mlp_scale, n, H, c.st));
  }
  CHORUS_TRY(cuda::rms_norm(h, c.m.final_norm, F(s.xn), n, H, eps, c.st));
  CHORUS_TRY(ops::sgemm(c.h, false, true, L, n, H, 1.0f, c.m.output_proj, H, F(s.xn), H, 0.0f, y, n));
  return add_bias(c, y, c.m.output_b, L, n, false);
}

// The four buffers of `all` other than `in` and `out`.
struct Free {
  float* b[4];
};
Free others(const std::array<float*, CudaStreamState::kActBuffers>& all, const float* in, const float* out) {
  Free f{};
  int k = 0;
  for (float* p : all)
    if (p != in && p != out && k < 4) f.b[k++] = p;
  return f;
}

// ConvNeXt upsample stage: x cf [C, n] → y cf [C, n·r].
Status upsample(const Ctx& c, const DevUpsample& u, const float* x, int64_t n, float* y, const Free& f) {
  const int64_t C = u.up.cout, m = n * u.up.stride;
  float *up = f.b[0], *dw = f.b[1], *rows = f.b[2], *wide = f.b[3], *pw = f.b[1];
  CHORUS_TRY(conv_t(c, u.up, x, n, up));
  CHORUS_TRY(ops::depthwise_causal(c.hin + u.dw.hist, c.hout + u.dw.hist, up, C, m, u.dw.w, u.dw.b, u.dw.kernel,
                                   u.dw.dilation, dw, c.st));
  CHORUS_TRY(ops::layer_norm_columns(dw, C, m, u.norm_w, u.norm_b, 1e-6f, rows, c.st));
  CHORUS_TRY(ops::sgemm(c.h, false, true, m, 4 * C, C, 1.0f, rows, C, u.pw1, C, 0.0f, wide, 4 * C));
  CHORUS_TRY(ops::bias_gelu_rows(wide, u.pw1_b, m, 4 * C, c.st));
  CHORUS_TRY(ops::sgemm(c.h, false, true, C, m, 4 * C, 1.0f, u.pw2, 4 * C, wide, 4 * C, 0.0f, pw, m));
  return ops::convnext_residual(up, pw, u.pw2_b, u.gamma, C, m, y, c.st);
}

// Vocoder: x cf [latent, n] → clamped samples [n · upsampling] in state.audio.
Status vocoder(const Ctx& c, float* x, int64_t n, const std::array<float*, CudaStreamState::kActBuffers>& all) {
  const CudaDecoderModel& m = c.m;
  float* a = others(all, x, nullptr).b[0];
  CHORUS_TRY(conv(c, m.conv_in, x, n, 1, n, Snake{}, a));
  const float* pending_bias = m.conv_in.b;  // conv_in's bias, added with the first block's SnakeBeta
  int64_t ch = m.conv_in.cout, steps = n;
  for (const DevBlock& b : m.blocks) {
    Free f = others(all, a, nullptr);
    float *act = f.b[0], *up = f.b[1], *c1 = f.b[2], *c2 = f.b[3];
    ops::ChannelOp sn;
    sn.x = a;
    sn.y = act;
    sn.xcs = sn.ycs = steps;
    sn.xts = sn.yts = 1;
    sn.channels = ch;
    sn.steps = steps;
    sn.bias = pending_bias;
    sn.snake = b.act;
    CHORUS_TRY(ops::channel_op(sn, c.st));
    pending_bias = nullptr;
    CHORUS_TRY(conv_t(c, b.up, act, steps, up));
    a = up;
    ch = b.up.cout;
    steps *= b.up.stride;
    for (const DevResidualUnit& u : b.units) {  // a = a + conv2(snake(conv1(snake(a))))
      CHORUS_TRY(conv(c, u.conv1, a, steps, 1, steps, u.act1, c1));
      ops::ChannelOp op;
      op.x = op.y = c1;
      op.xcs = op.ycs = steps;
      op.xts = op.yts = 1;
      op.channels = ch;
      op.steps = steps;
      op.bias = u.conv1.b;
      op.snake = u.act2;
      CHORUS_TRY(ops::channel_op(op, c.st));
      CHORUS_TRY(conv(c, u.conv2, c1, steps, 1, steps, Snake{}, c2));
      op.x = c2;
      op.y = a;
      op.bias = u.conv2.b;
      op.snake = Snake{};
      op.residual = a;
      CHORUS_TRY(ops::channel_op(op, c.st));
    }
  }
  float* raw = others(all, a, nullptr).b[0];
  CHORUS_TRY(conv(c, m.conv_out, a, steps, 1, steps, m.act_out, raw));
  ops::ChannelOp out;
  out.x = raw;
  out.y = F(c.s.audio);
  out.xcs = out.ycs = steps;
  out.xts = out.yts = 1;
  out.channels = 1;
  out.steps = steps;
  out.bias = m.conv_out.b;
  out.clamp = true;
  return ops::channel_op(out, c.st);
}

}  // namespace

Status run_step_cuda(const CudaDecoderModel& m, CudaStreamState& s, int64_t n) {
  if (n < 1 || n > s.block) return make_error(ErrorCode::kInternal, "GPU decoder step larger than its block");
  const auto& d = m.config.decoder;
  const Ctx c{m, s, s.stream.get(), s.cublas.get(), F(s.hist[static_cast<size_t>(s.parity)]),
              F(s.hist[static_cast<size_t>(1 - s.parity)])};
  std::array<float*, CudaStreamState::kActBuffers> all{};
  for (size_t i = 0; i < all.size(); ++i) all[i] = F(s.act[i]);
  const int64_t dim = d.codebook_dim / 2, cd = d.codebook_dim, L = d.latent_dim;

  // RVQ: per-group codebook sums, each projected (1×1 conv, no bias), summed; channels-first [cd, n].
  float *sem = all[0], *ac = all[1], *q = all[2];
  CHORUS_TRY(ops::rvq_sums(s.codes.as<int32_t>(), n, d.num_quantizers, d.num_semantic_quantizers, m.rvq_tables,
                           d.codebook_size, dim, sem, ac, c.st));
  CHORUS_TRY(ops::sgemm(c.h, false, true, cd, n, dim, 1.0f, m.proj_first, dim, sem, dim, 0.0f, q, n));
  CHORUS_TRY(ops::sgemm(c.h, false, true, cd, n, dim, 1.0f, m.proj_rest, dim, ac, dim, 1.0f, q, n));

  float* pre = all[0];
  CHORUS_TRY(conv(c, m.pre_conv, q, n, 1, n, Snake{}, pre));
  CHORUS_TRY(add_bias(c, pre, m.pre_conv.b, L, n, false));
  float* x = all[1];
  CHORUS_TRY(transformer(c, pre, n, x));

  int64_t steps = n;
  for (const DevUpsample& u : m.upsample) {
    float* y = others(all, x, nullptr).b[0];
    CHORUS_TRY(upsample(c, u, x, steps, y, others(all, x, y)));
    x = y;
    steps *= u.up.stride;
  }
  return vocoder(c, x, steps, all);
}

}  // namespace chorus::codec::detail

#endif  // CHORUS_HAVE_CUDA
