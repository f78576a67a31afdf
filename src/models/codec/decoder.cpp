// Decoder loading and the per-step pipeline (codes -> samples) over one set of stream caches.
#include "models/codec/decoder.h"

#include <algorithm>
#include <limits>

#include "io/safetensors.h"
#include "models/codec/decoder_model.h"
#include "models/codec/weights.h"

namespace chorus::codec {

using detail::DecoderModel;
using detail::StreamCaches;

namespace {

// Invariants the stages rely on that a hand-built CodecConfig could break (configs read from
// files are already checked by the parser).
Status check_config(const CodecConfig& c) {
  const auto& d = c.decoder;
  const auto& t = d.transformer;
  auto bad = [](const std::string& what) {
    return make_error(ErrorCode::kInvalidArgument, "codec config: " + what);
  };
  if (d.num_quantizers < 2 || d.num_semantic_quantizers < 1 || d.num_semantic_quantizers >= d.num_quantizers)
    return bad("needs at least one semantic and one acoustic codebook");
  if (d.codebook_size < 1 || d.codebook_dim < 2 || d.codebook_dim % 2 || d.latent_dim < 1)
    return bad("codebook_size, codebook_dim (even) and latent_dim must be positive");
  if (t.hidden < 1 || t.intermediate < 1 || t.layers < 0 || t.heads < 1 || t.kv_heads < 1 ||
      t.heads % t.kv_heads || t.head_dim < 2 || t.head_dim % 2)
    return bad("inconsistent transformer dimensions");
  if (d.sliding_window < 1) return bad("sliding_window must be >= 1");
  int64_t prod = 1;
  for (int64_t r : d.upsampling_ratios) {
    if (r < 1) return bad("upsampling_ratios must be >= 1");
    prod *= r;
  }
  if (d.upsample_rates.empty()) return bad("upsample_rates is empty");
  for (int64_t r : d.upsample_rates) {
    if (r < 1) return bad("upsample_rates must be >= 1");
    prod *= r;
  }
  if ((d.decoder_dim >> d.upsample_rates.size()) < 1) return bad("decoder_dim too small for its blocks");
  if (prod != c.samples_per_frame)
    return bad("upsampling factors multiply to " + std::to_string(prod) + ", not samples_per_frame " +
               std::to_string(c.samples_per_frame));
  return ok_status();
}

}  // namespace

Result<Decoder> Decoder::load(const io::Checkpoint& ckpt, const CodecConfig& config) {
  CHORUS_TRY(check_config(config));
  WeightTable table;
  declare_decoder_weights(config, table);
  CHORUS_TRY(table.check(ckpt, ckpt.label()));

  const auto& d = config.decoder;
  const Weights w(ckpt, "decoder.");
  auto m = std::make_shared<DecoderModel>();
  m->config = config;
  m->rvq = detail::Dequantizer::load(w, d);
  m->pre_conv = detail::CausalConv1d::load(w, "pre_conv.conv", d.codebook_dim, d.latent_dim, 3);
  m->transformer = detail::DecoderTransformer::load(w, d);
  for (size_t i = 0; i < d.upsampling_ratios.size(); ++i)
    m->upsample.push_back(detail::UpsampleStage::load(w.sub("upsample." + std::to_string(i) + "."),
                                                      d.latent_dim, d.upsampling_ratios[i]));
  m->vocoder = detail::Vocoder::load(w, d);

  Decoder dec;
  dec.model_ = std::move(m);
  dec.pool_ = &ThreadPool::global();
  return dec;
}

const CodecConfig& Decoder::config() const { return model_->config; }

Status Decoder::set_block_frames(int64_t frames) {
  if (frames < 1 || frames > 4096)
    return make_error(ErrorCode::kOutOfRange, "decoder block size must be in [1, 4096] frames");
  block_frames_ = frames;
  return ok_status();
}

std::unique_ptr<StreamCaches> Decoder::new_caches(int64_t block_frames) const {
  const DecoderModel& m = *model_;
  auto c = std::make_unique<StreamCaches>();
  c->block_frames = block_frames;
  c->pre_conv_hist = m.pre_conv.initial_history();
  c->transformer = m.transformer.new_cache(block_frames);
  for (const auto& u : m.upsample) c->upsample.push_back(u.new_state());
  c->vocoder = m.vocoder.new_state();
  return c;
}

void Decoder::run(StreamCaches& c, const int32_t* codes, int64_t frames, std::vector<float>& out,
                  const StageTap* tap) const {
  StreamCaches* caches[] = {&c};
  const int32_t* of[] = {codes};
  const int64_t counts[] = {frames};
  std::vector<float>* outs[] = {&out};
  run_batch(caches, of, counts, outs, c, tap);
}

void Decoder::run_batch(std::span<StreamCaches* const> caches, std::span<const int32_t* const> codes,
                        std::span<const int64_t> frames, std::span<std::vector<float>* const> outs, StreamCaches& c,
                        const StageTap* tap) const {
  const DecoderModel& m = *model_;
  const int64_t Q = m.config.decoder.num_quantizers, cd = m.config.decoder.codebook_dim;
  const int64_t L = m.config.decoder.latent_dim;
  auto emit = [&](const std::string& name, const detail::Buffer& b, int64_t ch, int64_t steps) {
    if (tap && *tap) (*tap)(name, b.data(), ch, steps);
  };
  std::vector<int64_t> done(caches.size(), 0);
  std::vector<StreamCaches*> now;
  std::vector<std::vector<float>*> now_out;
  std::vector<int64_t> counts;
  std::vector<int32_t> packed;
  std::vector<detail::Buffer*> pre_hist;
  std::vector<detail::TransformerCache*> tf;
  std::vector<detail::UpsampleState*> up;
  std::vector<detail::VocoderState*> voc;
  // Rounds of at most each stream's block of frames, the streams with frames left side by side.
  for (;;) {
    now.clear();
    now_out.clear();
    counts.clear();
    packed.clear();
    for (size_t i = 0; i < caches.size(); ++i) {
      const int64_t n = std::min(caches[i]->block_frames, frames[i] - done[i]);
      if (n <= 0) continue;
      now.push_back(caches[i]);
      now_out.push_back(outs[i]);
      counts.push_back(n);
      packed.insert(packed.end(), codes[i] + done[i] * Q, codes[i] + (done[i] + n) * Q);
      done[i] += n;
    }
    if (now.empty()) return;
    const detail::Segments seg = detail::Segments::of(counts);
    const int64_t n = seg.total;
    c.x.resize(static_cast<size_t>(n * cd));
    m.rvq.forward(packed.data(), n, c.x.data(), c.tmp, pool_);
    c.y.resize(c.x.size());
    detail::transpose(c.x.data(), n, cd, c.y.data());  // [cd, n]
    emit("dequant", c.y, cd, n);

    pre_hist.clear();
    tf.clear();
    for (StreamCaches* s : now) {
      pre_hist.push_back(&s->pre_conv_hist);
      tf.push_back(&s->transformer);
    }
    c.x.resize(static_cast<size_t>(L * n));
    m.pre_conv.forward_batch(pre_hist, c.y.data(), seg, c.x.data(), c.tmp, c.pre_conv_scratch, pool_);
    emit("pre_conv", c.x, L, n);

    c.y.resize(c.x.size());
    detail::transpose(c.x.data(), L, n, c.y.data());  // [n, L]
    m.transformer.forward_batch(tf, c.y.data(), seg, c.x.data(), c.transformer, pool_);
    detail::transpose(c.x.data(), n, L, c.y.data());  // [L, n]
    emit("pre_transformer", c.y, L, n);

    detail::Segments at = seg;
    for (size_t i = 0; i < m.upsample.size(); ++i) {
      up.clear();
      for (StreamCaches* s : now) up.push_back(&s->upsample[i]);
      const detail::Segments next = at.scaled(m.upsample[i].ratio());
      c.upsampled.resize(static_cast<size_t>(L * next.total));
      c.x.resize(static_cast<size_t>(L * next.total));
      m.upsample[i].forward_batch(up, c.y.data(), at, c.upsampled.data(), c.x.data(), c.upsample_scratch, pool_);
      at = next;
      emit("upsample" + std::to_string(i) + "_0", c.upsampled, L, at.total);
      emit("upsample" + std::to_string(i) + "_1", c.x, L, at.total);
      std::swap(c.x, c.y);
    }
    voc.clear();
    for (StreamCaches* s : now) voc.push_back(&s->vocoder);
    m.vocoder.forward_batch(voc, c.y.data(), at, now_out, c.vocoder_scratch, pool_, tap);
  }
}

Status Decoder::decode_batch(std::span<DecoderState* const> states, std::span<const int32_t* const> codes,
                             std::span<const int64_t> frames, std::span<std::vector<float>* const> outs) const {
  const size_t S = states.size();
  if (codes.size() != S || frames.size() != S || outs.size() != S)
    return make_error(ErrorCode::kInvalidArgument, "decode_batch: states, codes, frames and outputs differ in number");
  // Everything is checked before anything is decoded, so that an error leaves every stream as it was.
  for (size_t i = 0; i < S; ++i) {
    if (!states[i] || !outs[i]) return make_error(ErrorCode::kInvalidArgument, "decode_batch: no state or output");
    const DecoderState& st = *states[i];
    if (st.owner_ != model_.get() || !st.current_)
      return make_error(ErrorCode::kInvalidArgument, "decoder state was not made by this decoder");
    if (st.finished_) return make_error(ErrorCode::kInvalidArgument, "decoder stream already flushed");
    if (st.mode_ != DecodeMode::kExact && !(st.chunking_.chunk_frames >= 1 && st.chunking_.left_context >= 0 &&
                                            st.chunking_.left_context < st.chunking_.chunk_frames))
      return make_error(ErrorCode::kInvalidArgument, "official chunking needs 0 <= left context < chunk size");
    for (size_t j = 0; j < i; ++j)
      if (states[j] == states[i]) return make_error(ErrorCode::kInvalidArgument, "decode_batch: a stream twice");
    CHORUS_TRY(validate_codes(codes[i], frames[i]));
    const int64_t max_frames = static_cast<int64_t>(outs[i]->max_size() - outs[i]->size()) / samples_per_frame();
    if (frames[i] > max_frames || st.frames_ > std::numeric_limits<int64_t>::max() - frames[i])
      return make_error(ErrorCode::kResourceExhausted, "too many frames for one output buffer");
  }
  // Exact-mode streams go through one pass per round; the official chunked mode, whose chunks
  // switch caches, stream by stream.
  std::vector<StreamCaches*> caches;
  std::vector<const int32_t*> of;
  std::vector<int64_t> counts;
  std::vector<std::vector<float>*> to;
  const StageTap* tap = nullptr;  // a stream's tap sees its stages when it is decoded alone
  for (size_t i = 0; i < S; ++i) {
    DecoderState& st = *states[i];
    if (frames[i] == 0) continue;
    if (st.mode_ != DecodeMode::kExact) {
      CHORUS_TRY(decode_official(st, codes[i], frames[i], *outs[i]));
      continue;
    }
    caches.push_back(st.current_.get());
    of.push_back(codes[i]);
    counts.push_back(frames[i]);
    to.push_back(outs[i]);
    st.frames_ += frames[i];
    tap = &st.tap_;
  }
  if (caches.empty()) return ok_status();
  // The rounds' activations go in the first stream's buffers: while it lives their capacity is
  // reused (fresh buffers would fault in their pages every call), and they go with it.
  run_batch(caches, of, counts, to, *caches[0], caches.size() == 1 ? tap : nullptr);
  return ok_status();
}

}  // namespace chorus::codec
