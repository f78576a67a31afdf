#include "audio/stream_encoder.h"

#include <FLAC/stream_encoder.h>
#include <lame.h>
#include <opusenc.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "audio/writer.h"

namespace chorus::audio {

namespace {

Error encoder_error(const char* format, const std::string& what) {
  return make_error(ErrorCode::kInternal, std::string(format) + " encoder: " + what);
}

// Copies `n` samples into `out`, non-finite values as 0 and the rest clipped to [-1, 1], so every
// codec sees the same input the 16-bit writers see.
void sanitize(const float* in, size_t n, std::vector<float>& out) {
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::isfinite(in[i]) ? std::clamp(in[i], -1.0f, 1.0f) : 0.0f;
}

// WAV and PCM: the file writer's byte-stream mode (same float -> s16 rounding as `chorus say`).
class WriterEncoder final : public StreamEncoder {
 public:
  explicit WriterEncoder(std::unique_ptr<AudioWriter> w) : w_(std::move(w)) {}
  Status write(const float* samples, size_t n) override { return w_->write(samples, n); }
  Status finish() override { return w_->close(); }

 private:
  std::unique_ptr<AudioWriter> w_;
};

class FlacEncoder final : public StreamEncoder {
 public:
  FlacEncoder(ByteSink sink) : sink_(std::move(sink)) {}
  ~FlacEncoder() override {
    if (enc_) {
      if (!finished_) {
        sink_ = nullptr;  // the stream is abandoned: nothing more goes out
        FLAC__stream_encoder_finish(enc_);
      }
      FLAC__stream_encoder_delete(enc_);
    }
  }

  Status init(int rate) {
    enc_ = FLAC__stream_encoder_new();
    if (!enc_) return encoder_error("flac", "out of memory");
    FLAC__stream_encoder_set_channels(enc_, 1);
    FLAC__stream_encoder_set_bits_per_sample(enc_, 16);
    FLAC__stream_encoder_set_sample_rate(enc_, static_cast<uint32_t>(rate));
    FLAC__stream_encoder_set_compression_level(enc_, 5);
    // No seek callback: libFLAC then leaves STREAMINFO's length and MD5 as "unknown".
    const auto st = FLAC__stream_encoder_init_stream(enc_, &FlacEncoder::on_write, nullptr, nullptr, nullptr, this);
    if (st != FLAC__STREAM_ENCODER_INIT_STATUS_OK)
      return encoder_error("flac", FLAC__StreamEncoderInitStatusString[st]);
    return ok_status();
  }

  Status write(const float* samples, size_t n) override {
    if (finished_) return encoder_error("flac", "write after finish");
    block_.resize(n);
    for (size_t i = 0; i < n; ++i) block_[i] = float_to_pcm16(samples[i]);
    if (n > 0 && !FLAC__stream_encoder_process_interleaved(enc_, block_.data(), static_cast<uint32_t>(n)))
      return failure();
    return ok_status();
  }

  Status finish() override {
    if (finished_) return ok_status();
    finished_ = true;
    if (!FLAC__stream_encoder_finish(enc_)) return failure();
    return sink_status_;
  }

 private:
  static FLAC__StreamEncoderWriteStatus on_write(const FLAC__StreamEncoder*, const FLAC__byte buffer[], size_t bytes,
                                                 uint32_t, uint32_t, void* self_ptr) {
    auto* self = static_cast<FlacEncoder*>(self_ptr);
    if (!self->sink_ || !self->sink_status_.ok()) return FLAC__STREAM_ENCODER_WRITE_STATUS_FATAL_ERROR;
    self->sink_status_ = self->sink_(buffer, bytes);
    return self->sink_status_.ok() ? FLAC__STREAM_ENCODER_WRITE_STATUS_OK : FLAC__STREAM_ENCODER_WRITE_STATUS_FATAL_ERROR;
  }
  Status failure() {
    if (!sink_status_.ok()) return sink_status_;
    return encoder_error("flac", FLAC__StreamEncoderStateString[FLAC__stream_encoder_get_state(enc_)]);
  }

  ByteSink sink_;
  Status sink_status_;
  FLAC__StreamEncoder* enc_ = nullptr;
  std::vector<FLAC__int32> block_;
  bool finished_ = false;
};

class Mp3Encoder final : public StreamEncoder {
 public:
  Mp3Encoder(ByteSink sink) : sink_(std::move(sink)) {}
  ~Mp3Encoder() override {
    if (gf_) lame_close(gf_);
  }

  Status init(int rate) {
    gf_ = lame_init();
    if (!gf_) return encoder_error("mp3", "out of memory");
    lame_set_in_samplerate(gf_, rate);
    lame_set_out_samplerate(gf_, rate);
    lame_set_num_channels(gf_, 1);
    lame_set_mode(gf_, MONO);
    lame_set_brate(gf_, 64);
    lame_set_quality(gf_, 5);
    lame_set_bWriteVbrTag(gf_, 0);  // the tag is written at the start after encoding: needs a seek
    if (lame_init_params(gf_) < 0) return encoder_error("mp3", "lame_init_params failed");
    return ok_status();
  }

  Status write(const float* samples, size_t n) override {
    if (finished_) return encoder_error("mp3", "write after finish");
    // LAME's contract: at most n + n/4 + 7200 bytes per call.
    constexpr size_t kBlock = 1 << 14;
    for (size_t off = 0; off < n; off += kBlock) {
      const size_t m = std::min(kBlock, n - off);
      sanitize(samples + off, m, clean_);
      out_.resize(m + m / 4 + 7200);
      const int k = lame_encode_buffer_ieee_float(gf_, clean_.data(), clean_.data(), static_cast<int>(m), out_.data(),
                                                  static_cast<int>(out_.size()));
      if (k < 0) return encoder_error("mp3", "lame_encode_buffer_ieee_float returned " + std::to_string(k));
      if (k > 0) CHORUS_TRY(sink_(out_.data(), static_cast<size_t>(k)));
    }
    return ok_status();
  }

  Status finish() override {
    if (finished_) return ok_status();
    finished_ = true;
    out_.resize(7200);
    const int k = lame_encode_flush(gf_, out_.data(), static_cast<int>(out_.size()));
    if (k < 0) return encoder_error("mp3", "lame_encode_flush returned " + std::to_string(k));
    if (k > 0) CHORUS_TRY(sink_(out_.data(), static_cast<size_t>(k)));
    return ok_status();
  }

 private:
  ByteSink sink_;
  lame_global_flags* gf_ = nullptr;
  std::vector<float> clean_;
  std::vector<unsigned char> out_;
  bool finished_ = false;
};

class OpusEncoder final : public StreamEncoder {
 public:
  OpusEncoder(ByteSink sink) : sink_(std::move(sink)) {}
  ~OpusEncoder() override {
    sink_ = nullptr;  // destroy may flush pages: nothing goes out after finish() or on abandon
    if (enc_) ope_encoder_destroy(enc_);
    if (comments_) ope_comments_destroy(comments_);
  }

  Status init(int rate) {
    comments_ = ope_comments_create();
    if (!comments_) return encoder_error("opus", "out of memory");
    ope_comments_add(comments_, "ENCODER", "chorus");
    OpusEncCallbacks cb{&OpusEncoder::on_write, &OpusEncoder::on_close};
    int err = 0;
    enc_ = ope_encoder_create_callbacks(&cb, this, comments_, rate, 1, 0, &err);
    if (!enc_ || err != OPE_OK) return encoder_error("opus", ope_strerror(err));
    ope_encoder_ctl(enc_, OPUS_SET_BITRATE(48000));
    // Pages go out at least every 100 ms of audio (48 kHz units), and the encoder looks ahead no
    // further than that before deciding, so a stream is heard early.
    ope_encoder_ctl(enc_, OPE_SET_MUXING_DELAY(4800));
    ope_encoder_ctl(enc_, OPE_SET_DECISION_DELAY(4800));
    if (int e = ope_encoder_flush_header(enc_); e != OPE_OK) return failure(e);
    return sink_status_;
  }

  Status write(const float* samples, size_t n) override {
    if (finished_) return encoder_error("opus", "write after finish");
    sanitize(samples, n, clean_);
    if (n > 0)
      if (int e = ope_encoder_write_float(enc_, clean_.data(), static_cast<int>(n)); e != OPE_OK) return failure(e);
    return sink_status_;
  }

  Status finish() override {
    if (finished_) return ok_status();
    finished_ = true;
    if (int e = ope_encoder_drain(enc_); e != OPE_OK) return failure(e);
    return sink_status_;
  }

 private:
  static int on_write(void* self_ptr, const unsigned char* ptr, opus_int32 len) {
    auto* self = static_cast<OpusEncoder*>(self_ptr);
    if (!self->sink_ || !self->sink_status_.ok()) return 1;
    self->sink_status_ = self->sink_(ptr, static_cast<size_t>(len));
    return self->sink_status_.ok() ? 0 : 1;
  }
  static int on_close(void*) { return 0; }
  Status failure(int e) {
    if (!sink_status_.ok()) return sink_status_;
    return encoder_error("opus", ope_strerror(e));
  }

  ByteSink sink_;
  Status sink_status_;
  OggOpusComments* comments_ = nullptr;
  OggOpusEnc* enc_ = nullptr;
  std::vector<float> clean_;
  bool finished_ = false;
};

}  // namespace

std::optional<StreamFormat> stream_format_from_name(const std::string& name) {
  if (name == "wav") return StreamFormat::kWav;
  if (name == "pcm") return StreamFormat::kPcm;
  if (name == "flac") return StreamFormat::kFlac;
  if (name == "mp3") return StreamFormat::kMp3;
  if (name == "opus") return StreamFormat::kOpus;
  return std::nullopt;
}

const char* stream_format_name(StreamFormat f) {
  switch (f) {
    case StreamFormat::kWav: return "wav";
    case StreamFormat::kPcm: return "pcm";
    case StreamFormat::kFlac: return "flac";
    case StreamFormat::kMp3: return "mp3";
    case StreamFormat::kOpus: return "opus";
  }
  return "?";
}

const char* stream_format_mime(StreamFormat f) {
  switch (f) {
    case StreamFormat::kWav: return "audio/wav";
    case StreamFormat::kPcm: return "audio/pcm";
    case StreamFormat::kFlac: return "audio/flac";
    case StreamFormat::kMp3: return "audio/mpeg";
    case StreamFormat::kOpus: return "audio/ogg";
  }
  return "application/octet-stream";
}

const char* supported_stream_formats() { return "mp3, opus, flac, wav, pcm"; }

Result<std::unique_ptr<StreamEncoder>> StreamEncoder::create(StreamFormat format, int sample_rate, ByteSink sink) {
  if (sample_rate < 8000 || sample_rate > 192000)
    return make_error(ErrorCode::kInvalidArgument, "stream encoder: sample rate " + std::to_string(sample_rate) + " out of range");
  switch (format) {
    case StreamFormat::kWav:
    case StreamFormat::kPcm: {
      WriterOptions wo;
      wo.input_rate = sample_rate;
      wo.container = format == StreamFormat::kWav ? AudioContainer::kWav : AudioContainer::kRaw;
      CHORUS_ASSIGN(auto w, AudioWriter::open_stream(std::move(sink), wo));
      return std::unique_ptr<StreamEncoder>(std::make_unique<WriterEncoder>(std::move(w)));
    }
    case StreamFormat::kFlac: {
      auto e = std::make_unique<FlacEncoder>(std::move(sink));
      CHORUS_TRY(e->init(sample_rate));
      return std::unique_ptr<StreamEncoder>(std::move(e));
    }
    case StreamFormat::kMp3: {
      auto e = std::make_unique<Mp3Encoder>(std::move(sink));
      CHORUS_TRY(e->init(sample_rate));
      return std::unique_ptr<StreamEncoder>(std::move(e));
    }
    case StreamFormat::kOpus: {
      auto e = std::make_unique<OpusEncoder>(std::move(sink));
      CHORUS_TRY(e->init(sample_rate));
      return std::unique_ptr<StreamEncoder>(std::move(e));
    }
  }
  return make_error(ErrorCode::kInvalidArgument, "unknown stream format");
}

}  // namespace chorus::audio
