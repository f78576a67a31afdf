// Audio output, written block by block as a model produces it: WAV (16-bit PCM or 32-bit float),
// FLAC (16-bit) or headerless raw little-endian samples, to a file (through libsndfile), to
// standard output ("-") or to any byte sink (e.g. an HTTP response), optionally converted to
// another sample rate on the way.
//
// Streams (stdout, byte sinks) cannot seek back to fill in the length, so their WAV header says
// "unknown length" (RIFF and data sizes 0xFFFFFFFF, read as "until end of stream" by common
// readers); when stdout turns out to be a regular file the sizes are patched on close.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audio/resample.h"
#include "core/error.h"

namespace chorus::audio {

enum class AudioContainer { kAuto, kWav, kFlac, kRaw };
enum class SampleFormat { kPcm16, kFloat32 };

struct WriterOptions {
  int input_rate = 24000;  // rate of the samples passed to write()
  int output_rate = 0;     // 0: same as input_rate
  // kAuto: from the extension (.wav, .flac, .raw/.pcm); "-" and byte sinks default to WAV.
  AudioContainer container = AudioContainer::kAuto;
  SampleFormat sample_format = SampleFormat::kPcm16;  // FLAC supports kPcm16 only
};

// "wav", "flac", "raw"/"pcm" (case-insensitive) -> container; anything else -> nullopt.
std::optional<AudioContainer> container_from_name(const std::string& name);
// The container implied by a path's extension, or nullopt.
std::optional<AudioContainer> container_from_path(const std::string& path);

// The 44-byte canonical WAV header for mono audio; data_bytes 0xFFFFFFFF means unknown length.
std::array<uint8_t, 44> wav_header(int sample_rate, SampleFormat format, uint32_t data_bytes);

// Float -> 16-bit PCM as libsndfile/soundfile do it: clip to [-1, 1], scale by 32767, round to
// nearest; NaN becomes 0.
int16_t float_to_pcm16(float x);

class AudioWriter {
 public:
  // Receives the encoded bytes in order; a failed Status stops the writer (e.g. client gone).
  using ByteSink = std::function<Status(const uint8_t* data, size_t size)>;

  // A file path, or "-" for standard output (WAV or raw only).
  static Result<std::unique_ptr<AudioWriter>> open(const std::string& path, const WriterOptions& opts = {});
  // WAV (streaming header) or raw to a byte sink. container kAuto means WAV.
  static Result<std::unique_ptr<AudioWriter>> open_stream(ByteSink sink, const WriterOptions& opts = {});

  ~AudioWriter();  // closes if close() was not called (errors are then lost)
  AudioWriter(const AudioWriter&) = delete;
  AudioWriter& operator=(const AudioWriter&) = delete;

  // Mono samples at input_rate, nominally in [-1, 1]. Non-finite samples are written as 0 and
  // counted; 16-bit output is clipped.
  Status write(const float* samples, size_t n);
  // Flushes the resampler's tail and finalises the file (header sizes). Idempotent.
  Status close();

  AudioContainer container() const { return container_; }
  int output_rate() const { return output_rate_; }
  uint64_t frames_written() const { return frames_written_; }  // at output_rate
  uint64_t nonfinite_samples() const { return nonfinite_; }

  class Sink;  // where encoded samples go (libsndfile file or byte stream); defined in writer.cpp

 private:
  AudioWriter() = default;
  static Result<std::unique_ptr<AudioWriter>> make(std::unique_ptr<Sink> sink, AudioContainer container,
                                                   const WriterOptions& opts);
  Status emit(const float* samples, size_t n);

  std::unique_ptr<Sink> sink_;
  std::optional<StreamResampler> resampler_;  // only when the output rate differs
  std::vector<float> resample_in_;  // sanitised input block
  std::vector<float> resampled_;
  AudioContainer container_ = AudioContainer::kWav;
  SampleFormat format_ = SampleFormat::kPcm16;
  int output_rate_ = 0;
  uint64_t frames_written_ = 0;
  uint64_t nonfinite_ = 0;
  bool closed_ = false;
  bool failed_ = false;
  std::vector<float> clean_;     // sanitised copy of a block
  std::vector<int16_t> pcm16_;   // converted block
};

}  // namespace chorus::audio
