// One step of the GPU decoder for a batch of streams (n frames each → n·1920 samples each), the
// same stages as the CPU pipeline (decoder.cpp): RVQ → pre_conv → transformer → upsample stages →
// vocoder → clamp. Matrix products go through the batch-invariant GEMM (f32, conv_ops.h), so a
// stream's samples do not depend on which other streams share the step; convolutions are im2col +
// GEMM with each stream's streaming histories read from its hist_in and written to its hist_out
// by the im2col kernels.
#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <cmath>

#include "models/codec/decoder_model_cuda.h"
#include "runtime/cuda/ops.h"

namespace chorus::codec::detail {

namespace ops = cuda::codec_ops;

static_assert(sizeof(void*) == 8 && sizeof(int64_t) == 8, "StreamArrays holds 8-byte entries");

StreamArrays StreamArrays::at(void* base, int64_t streams) {
  auto* p = static_cast<char*>(base);
  const size_t n = static_cast<size_t>(streams) * 8;
  StreamArrays a;
  a.hist_in = reinterpret_cast<const float* const*>(p);
  a.hist_out = reinterpret_cast<float* const*>(p + n);
  a.kv = reinterpret_cast<float* const*>(p + 2 * n);
  a.kv_capacity = reinterpret_cast<const int64_t*>(p + 3 * n);
  a.pos0 = reinterpret_cast<const int64_t*>(p + 4 * n);
  return a;
}

ScratchPlan scratch_plan(const CudaDecoderModel& m, int64_t frames) {
  const auto& d = m.config.decoder;
  const auto& t = d.transformer;
  ScratchPlan p;
  auto act = [&](int64_t v) { p.act = std::max(p.act, static_cast<size_t>(v)); };
  auto col = [&](int64_t v) { p.col = std::max(p.col, static_cast<size_t>(v)); };
  auto z = [&](int64_t v) { p.z = std::max(p.z, static_cast<size_t>(v)); };
  auto mm = [&](int64_t M, int64_t N, int64_t K) { p.partial = std::max(p.partial, ops::gemm_partial_floats(M, N, K)); };
  const int64_t L = d.latent_dim, cd = d.codebook_dim, H = t.hidden, D = t.head_dim;
  const int64_t qd = t.heads * D, qkvd = qd + 2 * t.kv_heads * D, I = t.intermediate;
  act(frames * cd);
  act(frames * L);
  col(frames * cd * 3);
  mm(cd, frames, cd / 2);
  mm(L, frames, m.pre_conv.cin * m.pre_conv.kernel);
  for (auto [N, K] : {std::pair{H, L}, {qkvd, H}, {H, qd}, {2 * I, H}, {H, I}}) mm(frames, N, K);
  mm(L, frames, H);
  int64_t steps = frames;
  for (const DevUpsample& u : m.upsample) {
    z(u.up.cout * u.up.kernel * steps);
    mm(u.up.cout * u.up.kernel, steps, u.up.cin);
    steps *= u.up.stride;
    act(4 * L * steps);
    mm(steps, 4 * L, L);
    mm(L, steps, 4 * L);
  }
  act(m.conv_in.cout * steps);
  col(m.conv_in.cin * m.conv_in.kernel * steps);
  mm(m.conv_in.cout, steps, m.conv_in.cin * m.conv_in.kernel);
  for (const DevBlock& b : m.blocks) {
    z(b.up.cout * b.up.kernel * steps);
    mm(b.up.cout * b.up.kernel, steps, b.up.cin);
    steps *= b.up.stride;
    act(b.up.cout * steps);
    for (const DevResidualUnit& u : b.units) {
      col(u.conv1.cin * u.conv1.kernel * steps);
      mm(u.conv1.cout, steps, u.conv1.cin * u.conv1.kernel);
      mm(u.conv2.cout, steps, u.conv2.cin * u.conv2.kernel);
    }
  }
  col(m.conv_out.cin * m.conv_out.kernel * steps);
  mm(m.conv_out.cout, steps, m.conv_out.cin * m.conv_out.kernel);
  const int64_t widest = std::max({H, qkvd, 2 * I, L});
  p.rows = static_cast<size_t>(frames * widest);
  return p;
}

namespace {

struct Ctx {
  const CudaDecoderModel& m;
  BatchWorkspace& w;
  cudaStream_t st;
  int64_t streams;
  StreamArrays arrays;  // on the device
};

float* F(const cuda::DeviceBuffer& b) { return b.as<float>(); }

Status mm(const Ctx& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  const auto p = c.m.precision == CodecPrecision::kBf16 ? ops::GemmPrecision::kBf16 : ops::GemmPrecision::kF32;
  return ops::gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, F(c.w.partial), c.w.partial_floats, c.st, p);
}

ops::StreamHist hist(const Ctx& c, size_t offset) {
  return ops::StreamHist{c.arrays.hist_in, c.arrays.hist_out, static_cast<int64_t>(offset)};
}

// Where the channel op before a 1×1 conv or a transposed conv writes its output as bf16 for
// gemm_bf16_operands (the same bits as rounding it in the GEMM, half the bytes): the column
// buffer, free between the convolutions; null where the product stays on f32 inputs (f32 products,
// or sizes gemm_takes_bf16_operands refuses).
uint16_t* bf16_input(const Ctx& c, const uint16_t* w16, int64_t M, int64_t N, int64_t K) {
  return w16 && ops::gemm_takes_bf16_operands(M, N, K) ? c.w.col.as<uint16_t>() : nullptr;
}

// Causal conv of channels-first x [cin, streams·steps] (element (c, col) at x[c·xcs + col·xts]) →
// y [cout, streams·steps] without its bias (the caller adds it, usually fused into the next
// element-wise op). `pre`: SnakeBeta applied to the input first. x16: a 1×1 conv's input already
// as bf16 [cin, streams·steps] (from bf16_input), in place of x.
Status conv(const Ctx& c, const DevConv& cv, const float* x, int64_t xcs, int64_t xts, int64_t steps, Snake pre,
            float* y, const uint16_t* x16 = nullptr) {
  const int64_t N = c.streams * steps, K = cv.cin * cv.kernel;
  if (x16 && (cv.kernel != 1 || pre.alpha || xts != 1))
    return make_error(ErrorCode::kInternal, "codec conv: bf16 inputs are for plain 1×1 convs");
  if (x16)
    return ops::gemm_bf16_operands(ops::GemmPath::kAuto, cv.cout, N, K, 1.0f, cv.w16, K, x16, N, 0.0f, y, N,
                                   F(c.w.partial), c.w.partial_floats, c.st);
  const float* in = x;
  int64_t ld = xcs;
  // The conv's input as im2col reads it (and conv_to_one_bf16).
  ops::Im2col a;
  a.hist = hist(c, cv.hist);
  a.x = x;
  a.xcs = xcs;
  a.xts = xts;
  a.cin = cv.cin;
  a.steps = steps;
  a.streams = c.streams;
  a.kernel = cv.kernel;
  a.dilation = cv.dilation;
  a.snake = pre;
  // One output channel (conv_out) with bf16 products: its columns read in place, never written.
  if (cv.cout == 1 && cv.kernel > 1 && c.m.precision == CodecPrecision::kBf16 && ops::conv_to_one_fits(a))
    return ops::conv_to_one_bf16(ops::ConvToOne{a, cv.w, y}, c.st);
  // Many columns with bf16 products: the columns written as bf16 and multiplied as they are.
  const bool bf16_columns = cv.kernel > 1 && cv.w16 && ops::gemm_takes_bf16_operands(cv.cout, N, K);
  if (cv.kernel > 1 || pre.alpha || xts != 1) {
    a.col = F(c.w.col);
    if (bf16_columns) a.col16 = c.w.col.as<uint16_t>();
    CHORUS_TRY(ops::im2col_causal(a, c.st));
    if (bf16_columns)
      return ops::gemm_bf16_operands(ops::GemmPath::kAuto, cv.cout, N, K, 1.0f, cv.w16, K, a.col16, N, 0.0f, y, N,
                                     F(c.w.partial), c.w.partial_floats, c.st);
    in = a.col;
    ld = N;
  }
  return mm(c, false, false, cv.cout, N, K, cv.w, K, in, ld, 0.0f, y, N);
}

// Transposed conv of channels-first x [cin, streams·steps] → y [cout, streams·steps·stride] (bias
// included). x16: x already as bf16 (from bf16_input), in place of x.
Status conv_t(const Ctx& c, const DevConvT& cv, const float* x, int64_t steps, float* y,
              const uint16_t* x16 = nullptr) {
  const int64_t rows = cv.cout * cv.kernel, N = c.streams * steps;
  if (x16)
    CHORUS_TRY(ops::gemm_bf16_operands(ops::GemmPath::kAuto, rows, N, cv.cin, 1.0f, cv.w16t, cv.cin, x16, N, 0.0f,
                                       F(c.w.z), N, F(c.w.partial), c.w.partial_floats, c.st));
  else
    CHORUS_TRY(mm(c, true, false, rows, N, cv.cin, cv.w, rows, x, N, 0.0f, F(c.w.z), N));
  ops::TconvOut a;
  if (cv.kernel > cv.stride) a.hist = hist(c, cv.hist);
  a.z = F(c.w.z);
  a.cout = cv.cout;
  a.steps = steps;
  a.streams = c.streams;
  a.kernel = cv.kernel;
  a.stride = cv.stride;
  a.bias = cv.b;
  a.y = y;
  return ops::transposed_conv_output(a, c.st);
}

Status add_bias(const Ctx& c, float* x, const float* bias, int64_t channels, int64_t columns, bool time_major) {
  if (!bias) return ok_status();
  ops::ChannelOp op;
  op.x = op.y = x;
  op.xcs = op.ycs = time_major ? 1 : columns;
  op.xts = op.yts = time_major ? channels : 1;
  op.channels = channels;
  op.steps = columns;
  op.bias = bias;
  return ops::channel_op(op, c.st);
}

// x cf [L, streams·n] → y cf [L, streams·n] through input_proj, the layers, the final norm and
// output_proj.
Status transformer(const Ctx& c, const float* x, int64_t n, float* y) {
  const auto& d = c.m.config.decoder;
  const auto& t = d.transformer;
  const int64_t H = t.hidden, D = t.head_dim, qd = t.heads * D, kvd = t.kv_heads * D, L = d.latent_dim;
  const int64_t qkvd = qd + 2 * kvd, I = t.intermediate, rows = c.streams * n;
  const float eps = static_cast<float>(t.rms_eps);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  BatchWorkspace& w = c.w;
  float* h = F(w.h);
  CHORUS_TRY(mm(c, true, true, rows, H, L, x, rows, c.m.input_proj, L, 0.0f, h, H));
  CHORUS_TRY(add_bias(c, h, c.m.input_b, H, rows, true));
  for (size_t i = 0; i < c.m.layers.size(); ++i) {
    const DevLayer& l = c.m.layers[i];
    ops::StreamKv kv;
    kv.base = c.arrays.kv;
    kv.capacity = c.arrays.kv_capacity;
    kv.pos0 = c.arrays.pos0;
    kv.layer = static_cast<int64_t>(i);
    kv.kv_dim = kvd;
    CHORUS_TRY(cuda::rms_norm(h, l.input_norm, F(w.xn), rows, H, eps, c.st));
    CHORUS_TRY(mm(c, false, true, rows, qkvd, H, F(w.xn), H, l.qkv, H, 0.0f, F(w.qkv), qkvd));
    ops::RopeStore rs;
    rs.qkv = F(w.qkv);
    rs.n = n;
    rs.streams = c.streams;
    rs.q_heads = t.heads;
    rs.kv_heads = t.kv_heads;
    rs.head_dim = D;
    rs.inv_freq = c.m.inv_freq;
    rs.kv = kv;
    rs.q_out = F(w.q);
    CHORUS_TRY(ops::rope_store(rs, c.st));
    CHORUS_TRY(ops::window_attention(F(w.q), n, c.streams, t.heads, t.kv_heads, D, d.sliding_window, scale, kv,
                                     F(w.attn), c.st));
    CHORUS_TRY(mm(c, false, true, rows, H, qd, F(w.attn), qd, l.o, qd, 0.0f, F(w.proj), H));
    CHORUS_TRY(ops::scaled_add(h, F(w.proj), l.attn_scale, rows, H, c.st));
    CHORUS_TRY(cuda::rms_norm(h, l.post_norm, F(w.xn), rows, H, eps, c.st));
    CHORUS_TRY(mm(c, false, true, rows, 2 * I, H, F(w.xn), H, l.gate_up, H, 0.0f, F(w.gate_up), 2 * I));
    CHORUS_TRY(ops::swiglu_rows(F(w.gate_up), rows, I, F(w.inter), c.st));
    CHORUS_TRY(mm(c, false, true, rows, H, I, F(w.inter), I, l.down, I, 0.0f, F(w.proj), H));
    CHORUS_TRY(ops::scaled_add(h, F(w.proj), l.mlp_scale, rows, H, c.st));
  }
  CHORUS_TRY(cuda::rms_norm(h, c.m.final_norm, F(w.xn), rows, H, eps, c.st));
  CHORUS_TRY(mm(c, false, true, L, rows, H, c.m.output_proj, H, F(w.xn), H, 0.0f, y, rows));
  return add_bias(c, y, c.m.output_b, L, rows, false);
}

// The four buffers of `all` other than `in` and `out`.
struct Free {
  float* b[4];
};
Free others(const std::array<float*, BatchWorkspace::kActBuffers>& all, const float* in, const float* out) {
  Free f{};
  int k = 0;
  for (float* p : all)
    if (p != in && p != out && k < 4) f.b[k++] = p;
  return f;
}

// ConvNeXt upsample stage: x cf [C, streams·steps] → y cf [C, streams·steps·r].
Status upsample(const Ctx& c, const DevUpsample& u, const float* x, int64_t steps, float* y, const Free& f) {
  const int64_t C = u.up.cout, ms = steps * u.up.stride, cols = c.streams * ms;
  float *up = f.b[0], *dw = f.b[1], *rows = f.b[2], *wide = f.b[3], *pw = f.b[1];
  CHORUS_TRY(conv_t(c, u.up, x, steps, up));
  ops::Depthwise a;
  a.hist = hist(c, u.dw.hist);
  a.x = up;
  a.channels = C;
  a.steps = ms;
  a.streams = c.streams;
  a.kernel = u.dw.kernel;
  a.dilation = u.dw.dilation;
  a.weight = u.dw.w;
  a.bias = u.dw.b;
  a.y = dw;
  CHORUS_TRY(ops::depthwise_causal(a, c.st));
  CHORUS_TRY(ops::layer_norm_columns(dw, C, cols, u.norm_w, u.norm_b, 1e-6f, rows, c.st));
  CHORUS_TRY(mm(c, false, true, cols, 4 * C, C, rows, C, u.pw1, C, 0.0f, wide, 4 * C));
  CHORUS_TRY(ops::bias_gelu_rows(wide, u.pw1_b, cols, 4 * C, c.st));
  CHORUS_TRY(mm(c, false, true, C, cols, 4 * C, u.pw2, 4 * C, wide, 4 * C, 0.0f, pw, cols));
  return ops::convnext_residual(up, pw, u.pw2_b, u.gamma, C, cols, y, c.st);
}

// Vocoder: x cf [latent, streams·n] → clamped samples [streams · n · upsampling] in w.audio.
Status vocoder(const Ctx& c, float* x, int64_t n, const std::array<float*, BatchWorkspace::kActBuffers>& all) {
  const CudaDecoderModel& m = c.m;
  float* a = others(all, x, nullptr).b[0];
  CHORUS_TRY(conv(c, m.conv_in, x, c.streams * n, 1, n, Snake{}, a));
  const float* pending_bias = m.conv_in.b;  // conv_in's bias, added with the first block's SnakeBeta
  int64_t ch = m.conv_in.cout, steps = n;
  for (const DevBlock& b : m.blocks) {
    Free f = others(all, a, nullptr);
    float *act = f.b[0], *up = f.b[1], *c1 = f.b[2], *c2 = f.b[3];
    const int64_t cols = c.streams * steps;
    ops::ChannelOp sn;
    sn.x = a;
    sn.y = act;
    sn.xcs = sn.ycs = cols;
    sn.xts = sn.yts = 1;
    sn.channels = ch;
    sn.steps = cols;
    sn.bias = pending_bias;
    sn.snake = b.act;
    sn.y16 = bf16_input(c, b.up.w16t, b.up.cout * b.up.kernel, cols, b.up.cin);
    CHORUS_TRY(ops::channel_op(sn, c.st));
    pending_bias = nullptr;
    CHORUS_TRY(conv_t(c, b.up, act, steps, up, sn.y16));
    a = up;
    ch = b.up.cout;
    steps *= b.up.stride;
    const int64_t ucols = c.streams * steps;
    for (const DevResidualUnit& u : b.units) {  // a = a + conv2(snake(conv1(snake(a))))
      CHORUS_TRY(conv(c, u.conv1, a, ucols, 1, steps, u.act1, c1));
      ops::ChannelOp op;
      op.x = op.y = c1;
      op.xcs = op.ycs = ucols;
      op.xts = op.yts = 1;
      op.channels = ch;
      op.steps = ucols;
      op.bias = u.conv1.b;
      op.snake = u.act2;
      op.y16 = bf16_input(c, u.conv2.w16, u.conv2.cout, ucols, u.conv2.cin);
      CHORUS_TRY(ops::channel_op(op, c.st));
      CHORUS_TRY(conv(c, u.conv2, c1, ucols, 1, steps, Snake{}, c2, op.y16));
      op.y16 = nullptr;
      op.x = c2;
      op.y = a;
      op.bias = u.conv2.b;
      op.snake = Snake{};
      op.residual = a;
      CHORUS_TRY(ops::channel_op(op, c.st));
    }
  }
  const int64_t cols = c.streams * steps;
  float* raw = others(all, a, nullptr).b[0];
  CHORUS_TRY(conv(c, m.conv_out, a, cols, 1, steps, m.act_out, raw));
  ops::ChannelOp out;
  out.x = raw;
  out.y = F(c.w.audio);
  out.xcs = out.ycs = cols;
  out.xts = out.yts = 1;
  out.channels = 1;
  out.steps = cols;
  out.bias = m.conv_out.b;
  out.clamp = true;
  return ops::channel_op(out, c.st);
}

}  // namespace

Status run_step_cuda(const CudaDecoderModel& m, BatchWorkspace& w, int64_t streams, int64_t n) {
  if (n < 1 || streams < 1 || streams * n > w.frames)
    return make_error(ErrorCode::kInternal, "GPU decoder step larger than its workspace");
  const auto& d = m.config.decoder;
  const Ctx c{m, w, w.stream.get(), streams, StreamArrays::at(w.arrays.data(), w.frames)};
  std::array<float*, BatchWorkspace::kActBuffers> all{};
  for (size_t i = 0; i < all.size(); ++i) all[i] = F(w.act[i]);
  const int64_t dim = d.codebook_dim / 2, cd = d.codebook_dim, L = d.latent_dim, rows = streams * n;

  // RVQ: per-group codebook sums, each projected (1×1 conv, no bias), summed; channels-first [cd, rows].
  float *sem = all[0], *ac = all[1], *q = all[2];
  CHORUS_TRY(ops::rvq_sums(w.codes.as<int32_t>(), rows, d.num_quantizers, d.num_semantic_quantizers, m.rvq_tables,
                           d.codebook_size, dim, sem, ac, c.st));
  CHORUS_TRY(mm(c, false, true, cd, rows, dim, m.proj_first, dim, sem, dim, 0.0f, q, rows));
  CHORUS_TRY(mm(c, false, true, cd, rows, dim, m.proj_rest, dim, ac, dim, 1.0f, q, rows));

  float* pre = all[0];
  CHORUS_TRY(conv(c, m.pre_conv, q, rows, 1, n, Snake{}, pre));
  CHORUS_TRY(add_bias(c, pre, m.pre_conv.b, L, rows, false));
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
