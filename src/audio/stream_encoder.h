// Streaming audio encoders for byte streams (an HTTP response): mono float samples in, encoded bytes
// out as soon as the codec has them, with headers that need no seeking back.
//
//   wav   44-byte header with RIFF and data sizes 0xFFFFFFFF ("until end of stream"), 16-bit PCM
//   pcm   headerless 16-bit signed little-endian
//   flac  native FLAC through libFLAC (STREAMINFO's total length left 0 = unknown)
//   mp3   libmp3lame, constant bit rate, no Xing/LAME tag (it would need a seek)
//   opus  Ogg Opus through libopusenc (resamples to 48 kHz internally)
//
// AAC has no Debian-packaged encoder with a suitable licence in main, so it is not offered.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"

namespace chorus::audio {

enum class StreamFormat { kWav, kPcm, kFlac, kMp3, kOpus };

// "wav", "pcm", "flac", "mp3", "opus" (exact, lower case as the OpenAI API spells them).
std::optional<StreamFormat> stream_format_from_name(const std::string& name);
const char* stream_format_name(StreamFormat f);
const char* stream_format_mime(StreamFormat f);
// "mp3, opus, flac, wav, pcm": for error messages.
const char* supported_stream_formats();

class StreamEncoder {
 public:
  // Receives encoded bytes in order; a failed Status stops the encoder.
  using ByteSink = std::function<Status(const uint8_t* data, size_t size)>;

  // `sample_rate` is the rate of the samples given to write() (the model's, 24 kHz).
  static Result<std::unique_ptr<StreamEncoder>> create(StreamFormat format, int sample_rate, ByteSink sink);
  virtual ~StreamEncoder() = default;
  // Mono samples, nominally in [-1, 1]; non-finite values are written as silence.
  virtual Status write(const float* samples, size_t n) = 0;
  // Flushes what the codec holds back and ends the stream. Idempotent.
  virtual Status finish() = 0;
};

}  // namespace chorus::audio
