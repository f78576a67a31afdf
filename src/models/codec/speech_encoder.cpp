#include "models/codec/speech_encoder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/safetensors.h"
#include "models/codec/codec_folder.h"
#include "models/codec/encoder_transformer.h"
#include "models/codec/rvq_encode.h"
#include "models/codec/seanet_encoder.h"
#include "models/codec/weights.h"

namespace chorus::codec {

namespace detail {

struct SpeechEncoderModel {
  CodecConfig config;
  SeanetEncoder seanet;
  EncoderTransformer transformer;
  WeightMatrix downsample;  // [hidden, hidden·4]
  RvqEncoder rvq;
};

}  // namespace detail

namespace {

constexpr int64_t kDownsampleKernel = 4, kDownsampleStride = 2;

// Invariants the stages rely on that a hand-built config could break (file configs are checked by
// the parser too).
Status check_config(const CodecConfig& c) {
  const auto& e = c.encoder;
  auto bad = [](const std::string& what) { return make_error(ErrorCode::kInvalidArgument, "speech encoder config: " + what); };
  if (!e.present) return make_error(ErrorCode::kNotFound, "the speech codec has no encoder (encoder_config is missing)");
  if (e.num_filters < 1 || e.hidden_size < 1 || e.compress < 1 || e.num_filters % e.compress != 0)
    return bad("num_filters must be a positive multiple of compress");
  if (e.kernel_size < 1 || e.last_kernel_size < 1 || e.residual_kernel_size < 1 || e.num_residual_layers < 0 ||
      e.dilation_growth_rate < 1)
    return bad("kernel sizes and dilations must be positive");
  if (e.num_attention_heads < 1 || e.num_key_value_heads < 1 || e.num_attention_heads % e.num_key_value_heads ||
      e.head_dim < 2 || e.head_dim % 2 || e.num_hidden_layers < 0 || e.intermediate_size < 1 || e.sliding_window < 1)
    return bad("inconsistent transformer dimensions");
  if (e.codebook_dim < 1 || e.codebook_size < 1 || e.num_semantic_quantizers < 1)
    return bad("codebook sizes must be positive");
  if (c.encoder_valid_num_quantizers <= e.num_semantic_quantizers || c.encoder_valid_num_quantizers > e.num_quantizers)
    return bad("encoder_valid_num_quantizers must lie in (num_semantic_quantizers, num_quantizers]");
  int64_t hop = 1;
  for (int64_t r : e.upsampling_ratios) {
    if (r < 1 || r > 64) return bad("upsampling_ratios must lie in [1, 64]");
    hop *= r;
  }
  if (e.upsampling_ratios.empty() || hop * kDownsampleStride != c.samples_per_frame)
    return bad("the SEANet strides times the downsample stride (2) must equal samples_per_frame " +
               std::to_string(c.samples_per_frame));
  return ok_status();
}

// [rows, cols] -> [cols, rows]
std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  detail::transpose(x, rows, cols, out.data());
  return out;
}

}  // namespace

Result<SpeechEncoder> SpeechEncoder::load(const io::Checkpoint& ckpt, const CodecConfig& config) {
  CHORUS_TRY(check_config(config));
  WeightTable table;
  declare_encoder_weights(config, table);
  CHORUS_TRY(table.check(ckpt, ckpt.label()));
  const Weights w(ckpt, "encoder.");
  auto m = std::make_shared<detail::SpeechEncoderModel>();
  m->config = config;
  m->seanet = detail::SeanetEncoder::load(w, config.encoder);
  m->transformer = detail::EncoderTransformer::load(w, config.encoder);
  const int64_t H = config.encoder.hidden_size;
  m->downsample = detail::WeightMatrix::of(w.raw("downsample.conv.weight"), H, H * kDownsampleKernel);
  m->rvq = detail::RvqEncoder::load(w, config.encoder, config.encoder_valid_num_quantizers);
  SpeechEncoder enc;
  enc.model_ = std::move(m);
  enc.pool_ = &ThreadPool::global();
  CHORUS_TRY(enc.set_block_samples(24000));  // rounded up to whole 25 Hz columns
  return enc;
}

const CodecConfig& SpeechEncoder::config() const { return model_->config; }
int64_t SpeechEncoder::codebooks() const { return model_->rvq.keep(); }

Status SpeechEncoder::set_block_samples(int64_t samples) {
  if (samples < 1 || samples > kMaxSamples)
    return make_error(ErrorCode::kOutOfRange, "speech encoder block must be in [1, " + std::to_string(kMaxSamples) + "] samples");
  const int64_t hop = model_->seanet.hop();
  block_samples_ = (samples + hop - 1) / hop * hop;
  return ok_status();
}

Result<EncodedCodes> SpeechEncoder::encode(const float* samples, int64_t n) const {
  return encode(samples, n, detail::StageTap{});
}

Result<EncodedCodes> SpeechEncoder::encode(const float* samples, int64_t n, const detail::StageTap& tap) const {
  const detail::SpeechEncoderModel& m = *model_;
  if (n < 1 || !samples) return make_error(ErrorCode::kInvalidArgument, "speech encoder: no samples");
  if (n > kMaxSamples)
    return make_error(ErrorCode::kResourceExhausted, "speech encoder: " + std::to_string(n) + " samples is more than the " +
                                                         std::to_string(kMaxSamples / 24000) + " minutes allowed");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(samples[i]))
      return make_error(ErrorCode::kInvalidArgument, "speech encoder: non-finite sample at index " + std::to_string(i));
  const int64_t H = m.config.encoder.hidden_size;

  // SEANet, block by block -> x [T, H] time-major.
  std::vector<float> x;
  detail::SeanetState st = m.seanet.new_state();
  for (int64_t pos = 0; pos < n; pos += block_samples_) {
    const int64_t len = std::min(block_samples_, n - pos);
    m.seanet.forward(st, samples + pos, len, pos + len == n, x, pool_);
  }
  const int64_t T = static_cast<int64_t>(x.size()) / H;
  if (tap) tap("seanet", transposed(x.data(), T, H).data(), H, T);

  m.transformer.forward(x.data(), T, x.data(), pool_);
  if (tap) tap("transformer", x.data(), T, H);

  // Downsample: causal conv k 4 stride 2 whose padding repeats the edge columns: k − s on the left
  // and, past the end, enough to make the length a whole number of strides.
  const int64_t frames = (T + kDownsampleStride - 1) / kDownsampleStride;
  const int64_t left = kDownsampleKernel - kDownsampleStride, len = left + frames * kDownsampleStride;
  std::vector<float> padded(static_cast<size_t>(H * len));
  for (int64_t c = 0; c < H; ++c) {
    float* row = padded.data() + c * len;
    for (int64_t j = 0; j < len; ++j) row[j] = x[std::clamp<int64_t>(j - left, 0, T - 1) * H + c];
  }
  std::vector<float> down(static_cast<size_t>(H * frames));
  cpu::conv1d(padded.data(), H, len, m.downsample.ref, kDownsampleKernel, nullptr, kDownsampleStride, 1, 1,
              down.data(), pool_);
  if (tap) tap("downsample", down.data(), H, frames);

  EncodedCodes out;
  out.codebooks = m.rvq.keep();
  out.frames = frames;
  out.codes.resize(static_cast<size_t>(frames * out.codebooks));
  const std::vector<float> rows = transposed(down.data(), H, frames);
  m.rvq.encode(rows.data(), frames, out.codes.data(), pool_);
  // The reference keeps ceil(samples / samples_per_frame) frames: the same count by construction.
  const int64_t keep = (n + m.config.samples_per_frame - 1) / m.config.samples_per_frame;
  if (keep < out.frames) {
    out.frames = keep;
    out.codes.resize(static_cast<size_t>(keep * out.codebooks));
  }
  return out;
}

Result<SpeechEncoder> load_speech_encoder(const std::string& dir) {
  CHORUS_ASSIGN(std::string codec_dir, find_codec_dir(dir));
  const std::string config_file = (std::filesystem::path(codec_dir) / "config.json").string();
  CHORUS_ASSIGN(CodecConfig config, load_codec_config(config_file));
  if (!config.encoder.present)
    return make_error(ErrorCode::kNotFound, config_file + ": the speech codec has no encoder_config, so it cannot encode audio");
  CHORUS_ASSIGN(io::Checkpoint ckpt, io::Checkpoint::open_dir(codec_dir, "model"));
  return SpeechEncoder::load(ckpt, config);
}

}  // namespace chorus::codec
