#include "models/breeze_tts/depth_decoder.h"

#include <algorithm>
#include <cstring>

#include "core/dtype.h"

#include "models/breeze_tts/rope.h"
#include "models/breeze_tts/weights.h"
#include "io/weight_table.h"
#include "runtime/cpu/kernels.h"

namespace chorus::breeze_tts {

namespace {

// Slice `index` of a [n, in, out] tensor as an [out, in] tensor of the same dtype.
Tensor transposed_slice(const Tensor& t, int64_t index) {
  const int64_t in = t.dim(1), out = t.dim(2);
  const size_t es = dtype_size(t.dtype());
  Tensor r = Tensor::zeros(t.dtype(), {out, in});
  const auto* src = static_cast<const uint8_t*>(t.data()) + static_cast<size_t>(index * in * out) * es;
  auto* dst = static_cast<uint8_t*>(r.mutable_data());
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o)
      std::memcpy(dst + static_cast<size_t>(o * in + i) * es, src + static_cast<size_t>(i * out + o) * es, es);
  return r;
}

nn::Rounding rounding_of(Activations act) { return act == Activations::kBF16 ? nn::Rounding::kBF16 : nn::Rounding::kNone; }

void round_if(Activations act, float* x, int64_t n) {
  if (act == Activations::kBF16)
    for (int64_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

}  // namespace

Result<DepthDecoder> DepthDecoder::load(const Config& c, const io::Checkpoint& ckpt, cpu::WeightFormat format,
                                        ThreadPool* pool) {
  WeightTable table;
  declare_depth_weights(c, table);
  CHORUS_TRY(table.check(ckpt, ckpt.label()));
  DepthDecoder d;
  d.vocab_ = c.audio_vocab;
  d.codebooks_ = c.num_codebooks;
  d.in_width_ = c.audio_embed;
  d.hidden_ = c.depth.dims.hidden;
  CHORUS_ASSIGN(d.stack_, nn::Qwen3Stack::load(Weights(ckpt, kDepthPrefix), c.depth.dims, /*qk_norm=*/false, format, pool));
  CHORUS_TRY(d.stack_.set_rope_inv_freq(depth_rope_inv_freq(c.depth)));
  d.table_ = ckpt.tensor(kAudioTable);
  d.projector_ = ckpt.tensor(kDepthProjector);
  const Tensor heads = ckpt.tensor(kCodebooksHead);
  for (int64_t k = 0; k + 1 < d.codebooks_; ++k) d.heads_.push_back(transposed_slice(heads, k));
  return d;
}

nn::KvCache DepthDecoder::make_cache() const {
  nn::KvCache cache = stack_.make_cache();
  (void)cache.reserve(codebooks_);  // the 16 positions of a frame, allocated once
  return cache;
}

void DepthDecoder::project_hiddens(std::span<const float* const> hidden, float* out, ThreadPool* pool,
                                   Activations act) const {
  const int64_t n = static_cast<int64_t>(hidden.size()), W = in_width_;
  std::vector<float> rows(static_cast<size_t>(n * W));
  for (int64_t i = 0; i < n; ++i) std::copy_n(hidden[static_cast<size_t>(i)], W, rows.data() + i * W);
  cpu::linear(rows.data(), n, cpu::MatrixRef::of(projector_), nullptr, out, pool);
  round_if(act, out, n * hidden_);
}

void DepthDecoder::project_codes(int64_t codebook, const int32_t* codes, int64_t n, float* out, ThreadPool* pool,
                                 Activations act) const {
  std::vector<float> rows(static_cast<size_t>(n * in_width_));
  const size_t row_bytes = static_cast<size_t>(in_width_) * dtype_size(table_.dtype());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = codebook * vocab_ + codes[i];
    convert_to_f32(table_.dtype(), static_cast<const uint8_t*>(table_.data()) + static_cast<size_t>(r) * row_bytes,
                   rows.data() + i * in_width_, static_cast<size_t>(in_width_));
  }
  cpu::linear(rows.data(), n, cpu::MatrixRef::of(projector_), nullptr, out, pool);
  round_if(act, out, n * hidden_);
}

void DepthDecoder::apply_head(const float* y, int64_t n, int64_t head, float* logits, ThreadPool* pool) const {
  cpu::linear(y, n, cpu::MatrixRef::of(heads_[static_cast<size_t>(head)]), nullptr, logits, pool);
}

Status DepthDecoder::walk(std::span<const DepthBranch> branches, int32_t* codes, const DepthPicker& pick,
                          ThreadPool* pool, float* logits_out, Activations act) const {
  const auto B = static_cast<int64_t>(branches.size());
  DepthFrame f{branches, codes, pick};
  if (logits_out)
    f.pick = [&](int64_t codebook, std::span<const float> l) {
      std::copy(l.begin(), l.end(), logits_out + (codebook - 1) * B * vocab_);
      return pick(codebook, l);
    };
  return walk({&f, 1}, pool, act);
}

Status DepthDecoder::walk(std::span<const DepthFrame> frames, ThreadPool* pool, Activations act) const {
  int64_t B = 0;
  for (const DepthFrame& f : frames) {
    if (f.branches.empty()) return make_error(ErrorCode::kInvalidArgument, "depth decoder: no branch to walk");
    for (const DepthBranch& br : f.branches)
      if (!br.cache || !br.hidden)
        return make_error(ErrorCode::kInvalidArgument, "depth decoder: a branch lacks its cache or hidden state");
    if (!f.codes || !f.pick) return make_error(ErrorCode::kInvalidArgument, "depth decoder: a frame lacks its codes or picker");
    if (f.codes[0] < 0 || f.codes[0] >= vocab_)
      return make_error(ErrorCode::kInvalidArgument, "depth decoder: codebook-0 code " + std::to_string(f.codes[0]) +
                                                         " is outside [0, " + std::to_string(vocab_) + ")");
    B += static_cast<int64_t>(f.branches.size());
  }
  if (B == 0) return make_error(ErrorCode::kInvalidArgument, "depth decoder: no branch to walk");
  const int64_t H = hidden_, F = static_cast<int64_t>(frames.size());
  std::vector<nn::SequenceRows> seqs(static_cast<size_t>(B));
  // Step 1 feeds two rows per branch (h, c0) at positions 0 and 1; later steps one row. The
  // projections and heads of all branches go through one product each (a row's result does not
  // depend on the rows beside it, kernels.h).
  std::vector<float> x(static_cast<size_t>(2 * B * H)), y(static_cast<size_t>(2 * B * H)),
      logits(static_cast<size_t>(B * vocab_)), projected(static_cast<size_t>(std::max(B, F) * H)),
      last(static_cast<size_t>(B * H));
  std::vector<int32_t> prev(static_cast<size_t>(F));
  for (int64_t k = 1; k < codebooks_; ++k) {
    const int64_t rows = k == 1 ? 2 : 1;
    for (int64_t f = 0; f < F; ++f) prev[static_cast<size_t>(f)] = frames[static_cast<size_t>(f)].codes[k - 1];
    project_codes(k - 1, prev.data(), F, projected.data(), pool, act);
    int64_t b = 0;
    for (int64_t f = 0; f < F; ++f) {
      for (const DepthBranch& br : frames[static_cast<size_t>(f)].branches) {
        if (k == 1) br.cache->truncate(0);  // a new frame: nothing of the previous one is visible
        std::copy_n(projected.data() + f * H, H, x.data() + ((b + 1) * rows - 1) * H);
        seqs[static_cast<size_t>(b)] = {br.cache, k == 1 ? 0 : k, rows};
        ++b;
      }
    }
    if (k == 1) {
      std::vector<const float*> hidden;
      for (const DepthFrame& fr : frames)
        for (const DepthBranch& br : fr.branches) hidden.push_back(br.hidden);
      project_hiddens(hidden, projected.data(), pool, act);
      for (b = 0; b < B; ++b) std::copy_n(projected.data() + b * H, H, x.data() + b * rows * H);
    }
    CHORUS_TRY(stack_.forward(seqs, x.data(), y.data(), pool, rounding_of(act)));
    for (b = 0; b < B; ++b) std::copy_n(y.data() + ((b + 1) * rows - 1) * H, H, last.data() + b * H);
    apply_head(last.data(), B, k - 1, logits.data(), pool);
    int64_t first = 0;
    for (const DepthFrame& f : frames) {
      const auto n = static_cast<int64_t>(f.branches.size());
      CHORUS_ASSIGN(const int32_t code,
                    f.pick(k, {logits.data() + first * vocab_, static_cast<size_t>(n * vocab_)}));
      if (code < 0 || code >= vocab_)
        return make_error(ErrorCode::kInternal, "depth decoder: the picker returned " + std::to_string(code));
      f.codes[k] = code;
      first += n;
    }
  }
  return ok_status();
}

Status DepthDecoder::recompute(const float* hidden, std::span<const int32_t> codes, float* logits,
                               ThreadPool* pool, Activations act) const {
  const auto n = static_cast<int64_t>(codes.size());
  if (n < 1 || n > codebooks_ - 1)
    return make_error(ErrorCode::kInvalidArgument, "depth decoder: recompute needs 1.." + std::to_string(codebooks_ - 1) + " codes");
  for (int64_t p = 0; p < n; ++p)
    if (codes[static_cast<size_t>(p)] < 0 || codes[static_cast<size_t>(p)] >= vocab_)
      return make_error(ErrorCode::kInvalidArgument, "depth decoder: code outside the vocabulary");
  const int64_t H = hidden_;
  std::vector<float> x(static_cast<size_t>((n + 1) * H)), y(x.size());
  const float* h[1] = {hidden};
  project_hiddens(h, x.data(), pool, act);
  for (int64_t p = 1; p <= n; ++p) project_codes(p - 1, &codes[static_cast<size_t>(p - 1)], 1, x.data() + p * H, pool, act);
  nn::KvCache cache = make_cache();
  const nn::SequenceRows seq{&cache, 0, n + 1};
  CHORUS_TRY(stack_.forward({&seq, 1}, x.data(), y.data(), pool, rounding_of(act)));
  for (int64_t p = 1; p <= n; ++p) apply_head(y.data() + p * H, 1, p - 1, logits + (p - 1) * vocab_, pool);
  return ok_status();
}

}  // namespace chorus::breeze_tts
