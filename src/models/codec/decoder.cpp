// Decoder loading and the per-step pipeline (codes -> samples) over one set of stream caches.
#include "models/codec/decoder.h"

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
  const DecoderModel& m = *model_;
  const int64_t Q = m.config.decoder.num_quantizers, cd = m.config.decoder.codebook_dim;
  const int64_t L = m.config.decoder.latent_dim;
  auto emit = [&](const std::string& name, const detail::Buffer& b, int64_t ch, int64_t steps) {
    if (tap && *tap) (*tap)(name, b.data(), ch, steps);
  };
  for (int64_t f0 = 0; f0 < frames; f0 += c.block_frames) {
    const int64_t n = std::min(c.block_frames, frames - f0);
    c.x.resize(static_cast<size_t>(n * cd));
    m.rvq.forward(codes + f0 * Q, n, c.x.data(), c.tmp, pool_);
    c.y.resize(c.x.size());
    detail::transpose(c.x.data(), n, cd, c.y.data());  // [cd, n]
    emit("dequant", c.y, cd, n);

    c.x.resize(static_cast<size_t>(L * n));
    m.pre_conv.forward(c.pre_conv_hist, c.y.data(), n, c.x.data(), c.tmp, pool_);
    emit("pre_conv", c.x, L, n);

    c.y.resize(c.x.size());
    detail::transpose(c.x.data(), L, n, c.y.data());  // [n, L]
    m.transformer.forward(c.transformer, c.y.data(), n, c.x.data(), pool_);
    detail::transpose(c.x.data(), n, L, c.y.data());  // [L, n]
    emit("pre_transformer", c.y, L, n);

    int64_t steps = n;
    for (size_t i = 0; i < m.upsample.size(); ++i) {
      const int64_t up = steps * m.upsample[i].ratio();
      c.upsampled.resize(static_cast<size_t>(L * up));
      c.x.resize(static_cast<size_t>(L * up));
      m.upsample[i].forward(c.upsample[i], c.y.data(), steps, c.upsampled.data(), c.x.data(),
                            c.upsample_scratch, pool_);
      steps = up;
      emit("upsample" + std::to_string(i) + "_0", c.upsampled, L, steps);
      emit("upsample" + std::to_string(i) + "_1", c.x, L, steps);
      std::swap(c.x, c.y);
    }
    m.vocoder.forward(c.vocoder, c.y.data(), steps, out, c.vocoder_scratch, pool_, tap);
  }
}

}  // namespace chorus::codec
