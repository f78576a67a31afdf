#include "models/qwen3_tts/speaker_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "audio/mel.h"
#include "io/safetensors.h"
#include "models/codec/conv_layers.h"
#include "models/qwen3_tts/weights.h"
#include "runtime/cpu/kernels.h"

namespace chorus::qwen3_tts {

using codec::detail::f32_vector;
using codec::detail::WeightMatrix;
using Buf = std::vector<float>;

namespace detail {

namespace {

// Conv1d with padding="same" in reflect mode: total d·(k−1), left half rounded down.
struct SameConv {
  WeightMatrix weight;
  Buf bias;
  int64_t cin = 0, cout = 0, kernel = 1, dilation = 1;

  static SameConv load(const Weights& w, const std::string& name, int64_t cin, int64_t cout, int64_t kernel,
                       int64_t dilation = 1) {
    SameConv c;
    c.cin = cin;
    c.cout = cout;
    c.kernel = kernel;
    c.dilation = dilation;
    c.weight = WeightMatrix::of(w.raw(name + ".weight"), cout, cin * kernel);
    c.bias = f32_vector(w, name + ".bias");
    return c;
  }
  int64_t pad_left() const { return dilation * (kernel - 1) / 2; }
  int64_t pad_right() const { return dilation * (kernel - 1) - pad_left(); }
  // x [cin, T] (row stride T) -> y [cout, T]; needs T > max(pad_left, pad_right).
  void forward(const float* x, int64_t T, float* y, Buf& scratch, ThreadPool* pool) const {
    const int64_t L = pad_left(), R = pad_right();
    const float* in = x;
    if (L + R > 0) {
      const int64_t len = T + L + R;
      scratch.resize(static_cast<size_t>(cin * len));
      for (int64_t c = 0; c < cin; ++c) {
        const float* src = x + c * T;
        float* row = scratch.data() + c * len;
        for (int64_t j = 0; j < L; ++j) row[j] = src[L - j];  // x[L], ..., x[1]
        std::memcpy(row + L, src, sizeof(float) * T);
        for (int64_t j = 0; j < R; ++j) row[L + T + j] = src[T - 2 - j];  // x[T−2], x[T−3], ...
      }
      in = scratch.data();
    }
    cpu::conv1d(in, cin, T + L + R, weight.ref, kernel, bias.data(), 1, dilation, 1, y, pool);
  }
};

struct SeRes2NetBlock {
  SameConv tdnn1, tdnn2, se1, se2;
  std::vector<SameConv> res2net;  // scale − 1 convs on channel groups 1..scale−1
};

}  // namespace

struct SpeakerEncoderModel {
  SpeakerEncoderConfig config;
  std::shared_ptr<const audio::MelSpectrogram> mel;
  SameConv block0, mfa, asp_tdnn, asp_conv, fc;
  std::vector<SeRes2NetBlock> blocks;
  int64_t min_frames = 1;
};

}  // namespace detail

namespace {

using detail::SameConv;

// Mean and standard deviation over time of each row of x [C, T] under weights w [C, T] (or the
// uniform 1/T when w is null), with the reference's floor on the variance.
void weighted_stats(const float* x, const float* w, int64_t C, int64_t T, float* mean, float* std) {
  const double uniform = 1.0 / static_cast<double>(T);
  for (int64_t c = 0; c < C; ++c) {
    const float* xr = x + c * T;
    const float* wr = w ? w + c * T : nullptr;
    double m = 0;
    for (int64_t t = 0; t < T; ++t) m += (wr ? wr[t] : uniform) * xr[t];
    double v = 0;
    for (int64_t t = 0; t < T; ++t) {
      const double d = xr[t] - m;
      v += (wr ? wr[t] : uniform) * d * d;
    }
    mean[c] = static_cast<float>(m);
    std[c] = static_cast<float>(std::sqrt(std::max(v, 1e-12)));
  }
}

Status check_config(const SpeakerEncoderConfig& s) {
  auto bad = [](const std::string& what) { return make_error(ErrorCode::kInvalidArgument, "speaker encoder config: " + what); };
  if (s.sample_rate != 24000) return make_error(ErrorCode::kUnsupported, "speaker encoder: only 24 kHz input is supported");
  for (int i = 0; i < 5; ++i)
    if (s.channels[i] < 1 || s.kernel_sizes[i] < 1 || s.dilations[i] < 1) return bad("channels, kernels and dilations must be positive");
  if (s.channels[1] != s.channels[0] || s.channels[2] != s.channels[1] || s.channels[3] != s.channels[2])
    return bad("the residual SE-Res2Net blocks need equal channel counts (enc_channels[0..3])");
  if (s.res2net_scale < 2 || s.channels[1] % s.res2net_scale != 0) return bad("enc_channels must divide by enc_res2net_scale");
  if (s.mel_dim < 1 || s.enc_dim < 1 || s.attention_channels < 1 || s.se_channels < 1) return bad("sizes must be positive");
  return ok_status();
}

}  // namespace

Result<SpeakerEncoder> SpeakerEncoder::load(const io::Checkpoint& main, const Config& config) {
  if (!config.speaker_encoder)
    return make_error(ErrorCode::kUnsupported, std::string("the ") + variant_name(config.variant) +
                                                   " checkpoint has no speaker encoder (voice cloning needs a Base model)");
  const SpeakerEncoderConfig& s = *config.speaker_encoder;
  CHORUS_TRY(check_config(s));
  WeightTable table;
  declare_speaker_encoder_weights(config, table);
  CHORUS_TRY(table.check(main, main.label()));

  audio::MelConfig mc;
  mc.sample_rate = static_cast<int>(s.sample_rate);
  mc.n_mels = static_cast<int>(s.mel_dim);
  CHORUS_ASSIGN(audio::MelSpectrogram mel, audio::MelSpectrogram::create(mc));

  auto m = std::make_shared<detail::SpeakerEncoderModel>();
  m->config = s;
  m->mel = std::make_shared<const audio::MelSpectrogram>(std::move(mel));
  const Weights w(main, "speaker_encoder.");
  m->block0 = SameConv::load(w, "blocks.0.conv", s.mel_dim, s.channels[0], s.kernel_sizes[0], s.dilations[0]);
  int64_t max_pad = std::max(m->block0.pad_left(), m->block0.pad_right());
  for (int i = 1; i <= 3; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const int64_t C = s.channels[i], g = C / s.res2net_scale;
    detail::SeRes2NetBlock blk;
    blk.tdnn1 = SameConv::load(w, b + "tdnn1.conv", s.channels[i - 1], C, 1);
    for (int64_t j = 0; j + 1 < s.res2net_scale; ++j) {
      blk.res2net.push_back(SameConv::load(w, b + "res2net_block.blocks." + std::to_string(j) + ".conv", g, g,
                                           s.kernel_sizes[i], s.dilations[i]));
      max_pad = std::max({max_pad, blk.res2net.back().pad_left(), blk.res2net.back().pad_right()});
    }
    blk.tdnn2 = SameConv::load(w, b + "tdnn2.conv", C, C, 1);
    blk.se1 = SameConv::load(w, b + "se_block.conv1", C, s.se_channels, 1);
    blk.se2 = SameConv::load(w, b + "se_block.conv2", s.se_channels, C, 1);
    m->blocks.push_back(std::move(blk));
  }
  const int64_t C4 = s.channels[4];
  m->mfa = SameConv::load(w, "mfa.conv", s.channels[1] + s.channels[2] + s.channels[3], C4, s.kernel_sizes[4], s.dilations[4]);
  max_pad = std::max({max_pad, m->mfa.pad_left(), m->mfa.pad_right()});
  m->asp_tdnn = SameConv::load(w, "asp.tdnn.conv", 3 * C4, s.attention_channels, 1);
  m->asp_conv = SameConv::load(w, "asp.conv", s.attention_channels, C4, 1);
  m->fc = SameConv::load(w, "fc", 2 * C4, s.enc_dim, 1);
  m->min_frames = max_pad + 1;  // reflection mirrors around the edge column, so it needs pad < T

  SpeakerEncoder enc;
  enc.model_ = std::move(m);
  enc.pool_ = &ThreadPool::global();
  return enc;
}

int64_t SpeakerEncoder::dim() const { return model_->config.enc_dim; }
int64_t SpeakerEncoder::sample_rate() const { return model_->config.sample_rate; }

int64_t SpeakerEncoder::min_samples() const {
  const auto& c = model_->mel->config();
  // frames(N) = ⌊(N + 2·pad − n_fft) / hop⌋ + 1 >= min_frames, and the mel's own reflection needs N > pad.
  const int64_t need = (model_->min_frames - 1) * c.hop + c.n_fft - 2 * c.reflect_pad;
  return std::max<int64_t>(need, c.reflect_pad + 1);
}

Result<std::vector<float>> SpeakerEncoder::embed(const float* samples, int64_t n, const SpeakerTap& tap) const {
  if (!samples || n < 1) return make_error(ErrorCode::kInvalidArgument, "speaker encoder: no samples");
  if (n > kMaxSamples)
    return make_error(ErrorCode::kResourceExhausted, "speaker encoder: " + std::to_string(n) + " samples is more than the " +
                                                         std::to_string(kMaxSamples / 24000) + " s allowed");
  if (n < min_samples())
    return make_error(ErrorCode::kOutOfRange, "speaker encoder: " + std::to_string(n) + " samples is too short (need at least " +
                                                  std::to_string(min_samples()) + ")");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(samples[i]))
      return make_error(ErrorCode::kInvalidArgument, "speaker encoder: non-finite sample at index " + std::to_string(i));
  CHORUS_ASSIGN(Tensor mel, model_->mel->compute(samples, static_cast<size_t>(n)));
  if (tap) tap("mel", mel.f32(), mel.dim(0), mel.dim(1));
  return embed_mel(mel.f32(), mel.dim(0), tap);
}

Result<std::vector<float>> SpeakerEncoder::embed_mel(const float* mel, int64_t T, const SpeakerTap& tap) const {
  const detail::SpeakerEncoderModel& m = *model_;
  const auto& s = m.config;
  ThreadPool* pool = pool_;
  if (!mel || T < m.min_frames)
    return make_error(ErrorCode::kOutOfRange, "speaker encoder: " + std::to_string(T) + " mel frames is too few (need " +
                                                  std::to_string(m.min_frames) + ")");
  if (T > kMaxSamples / 128)  // far more frames than the longest input's mel has
    return make_error(ErrorCode::kResourceExhausted, "speaker encoder: " + std::to_string(T) + " mel frames is too many");
  const int64_t C = s.channels[1], C4 = s.channels[4], scale = s.res2net_scale, g = C / scale;
  Buf x(static_cast<size_t>(s.mel_dim * T)), scratch;
  codec::detail::transpose(mel, T, s.mel_dim, x.data());  // [T, mel] -> [mel, T]

  // hs[i]: output of block i, [C, T]
  std::vector<Buf> hs(4, Buf(static_cast<size_t>(C * T)));
  m.block0.forward(x.data(), T, hs[0].data(), scratch, pool);
  cpu::relu(hs[0].data(), C * T);
  if (tap) tap("block0", hs[0].data(), C, T);

  Buf a(static_cast<size_t>(C * T)), r(static_cast<size_t>(C * T)), part(static_cast<size_t>(g * T));
  Buf mean(static_cast<size_t>(std::max(C, C4))), se(static_cast<size_t>(s.se_channels)), gate(static_cast<size_t>(C));
  for (int i = 1; i <= 3; ++i) {
    const detail::SeRes2NetBlock& blk = m.blocks[i - 1];
    const Buf& in = hs[i - 1];
    blk.tdnn1.forward(in.data(), T, a.data(), scratch, pool);
    cpu::relu(a.data(), C * T);
    // Res2Net: group 0 passes through; group j >= 1 is B_j(a_j + out_{j−1}) (out_0 not added).
    std::memcpy(r.data(), a.data(), sizeof(float) * g * T);
    for (int64_t j = 1; j < scale; ++j) {
      const float* aj = a.data() + j * g * T;
      float* out = r.data() + j * g * T;
      if (j == 1) {
        std::memcpy(part.data(), aj, sizeof(float) * g * T);
      } else {
        const float* prev = r.data() + (j - 1) * g * T;
        for (int64_t k = 0; k < g * T; ++k) part[k] = aj[k] + prev[k];
      }
      blk.res2net[j - 1].forward(part.data(), T, out, scratch, pool);
      cpu::relu(out, g * T);
    }
    Buf& h = hs[i];
    blk.tdnn2.forward(r.data(), T, h.data(), scratch, pool);
    cpu::relu(h.data(), C * T);
    // Squeeze-excitation: per-channel gate from the time mean.
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t t = 0; t < T; ++t) sum += h[c * T + t];
      mean[c] = static_cast<float>(sum / static_cast<double>(T));
    }
    cpu::linear(mean.data(), 1, blk.se1.weight.ref, blk.se1.bias.data(), se.data(), nullptr);
    cpu::relu(se.data(), s.se_channels);
    cpu::linear(se.data(), 1, blk.se2.weight.ref, blk.se2.bias.data(), gate.data(), nullptr);
    cpu::sigmoid(gate.data(), C);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < T; ++t) h[c * T + t] = h[c * T + t] * gate[c] + in[c * T + t];
    if (tap) tap("block" + std::to_string(i), h.data(), C, T);
  }

  // Multi-layer feature aggregation over blocks 1..3.
  Buf cat(static_cast<size_t>(3 * C * T));
  for (int i = 1; i <= 3; ++i) std::memcpy(cat.data() + (i - 1) * C * T, hs[i].data(), sizeof(float) * C * T);
  Buf f(static_cast<size_t>(C4 * T));
  m.mfa.forward(cat.data(), T, f.data(), scratch, pool);
  cpu::relu(f.data(), C4 * T);
  if (tap) tap("mfa", f.data(), C4, T);

  // Attentive statistics pooling: attention from [f; mean; std] (global statistics broadcast over
  // time), softmax over time per channel, then attention-weighted mean and std.
  Buf mu(static_cast<size_t>(C4)), sd(static_cast<size_t>(C4));
  weighted_stats(f.data(), nullptr, C4, T, mu.data(), sd.data());
  Buf att_in(static_cast<size_t>(3 * C4 * T));
  std::memcpy(att_in.data(), f.data(), sizeof(float) * C4 * T);
  for (int64_t c = 0; c < C4; ++c) {
    std::fill_n(att_in.data() + (C4 + c) * T, T, mu[c]);
    std::fill_n(att_in.data() + (2 * C4 + c) * T, T, sd[c]);
  }
  Buf att(static_cast<size_t>(s.attention_channels * T)), logits(static_cast<size_t>(C4 * T));
  m.asp_tdnn.forward(att_in.data(), T, att.data(), scratch, pool);
  cpu::relu(att.data(), s.attention_channels * T);
  cpu::tanh_inplace(att.data(), s.attention_channels * T);
  m.asp_conv.forward(att.data(), T, logits.data(), scratch, pool);
  cpu::softmax(logits.data(), C4, T);
  Buf pooled(static_cast<size_t>(2 * C4));
  weighted_stats(f.data(), logits.data(), C4, T, pooled.data(), pooled.data() + C4);
  if (tap) tap("asp", pooled.data(), 2 * C4, 1);

  std::vector<float> xvec(static_cast<size_t>(s.enc_dim));
  cpu::linear(pooled.data(), 1, m.fc.weight.ref, m.fc.bias.data(), xvec.data(), nullptr);
  for (float v : xvec)
    if (!std::isfinite(v)) return make_error(ErrorCode::kInternal, "speaker encoder: non-finite x-vector");
  return xvec;
}

}  // namespace chorus::qwen3_tts
