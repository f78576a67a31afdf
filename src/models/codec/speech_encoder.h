// The 12.5 Hz speech codec's encoder (Qwen3-TTS speech_tokenizer/, Breeze TTS 2 audio_tokenizer/):
// 24 kHz mono waveform -> frames of reference codes, the first encoder_valid_num_quantizers (16) of
// its 32 codebooks. See qwen3_tts.md §4.3 and docs/voice.md.
//
//   SEANet (25 Hz) -> transformer -> downsample conv (k 4, stride 2, replicate padding; 12.5 Hz)
//   -> split RVQ encode
//
// N samples give ceil(N / samples_per_frame) frames. One immutable SpeechEncoder (cheap to copy,
// shareable between threads) encodes any number of signals; each call keeps its own buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/codec/codec_config.h"
#include "models/codec/vocoder.h"

namespace chorus::io {
class Checkpoint;
}

namespace chorus::codec {

namespace detail {
struct SpeechEncoderModel;
}

struct EncodedCodes {
  std::vector<int32_t> codes;  // [frames, codebooks], row-major
  int64_t frames = 0;
  int64_t codebooks = 0;
};

class SpeechEncoder {
 public:
  // Checks every encoder tensor of `ckpt` against the table the config implies (kNotFound when the
  // codec has no encoder), then builds the stages. Decoder tensors are ignored.
  static Result<SpeechEncoder> load(const io::Checkpoint& ckpt, const CodecConfig& config);

  const CodecConfig& config() const;
  int64_t sample_rate() const { return config().input_sample_rate; }
  int64_t samples_per_frame() const { return config().samples_per_frame; }
  int64_t codebooks() const;  // codes per frame (encoder_valid_num_quantizers)
  int64_t codebook_size() const { return config().encoder.codebook_size; }

  // nullptr: run on the calling thread only. Default: ThreadPool::global().
  void set_thread_pool(ThreadPool* pool) { pool_ = pool; }
  // SEANet input block in samples (rounded up to whole frames; default 1 s): bounds the memory of
  // a call, does not change the codes.
  Status set_block_samples(int64_t samples);

  // Mono samples at sample_rate() -> codes. kInvalidArgument for no samples or a non-finite one,
  // kResourceExhausted past max_samples (default: 10 minutes of audio).
  Result<EncodedCodes> encode(const float* samples, int64_t n) const;
  // The same, reporting stage outputs as the reference goldens name them: "seanet" [hidden, T25],
  // "transformer" [T25, hidden] (time-major), "downsample" [hidden, frames].
  Result<EncodedCodes> encode(const float* samples, int64_t n, const detail::StageTap& tap) const;

  static constexpr int64_t kMaxSamples = 24000 * 600;

 private:
  std::shared_ptr<const detail::SpeechEncoderModel> model_;
  ThreadPool* pool_ = nullptr;
  int64_t block_samples_ = 0;  // a multiple of the SEANet hop
};

// Loads the encoder of the codec `dir` designates (see codec_folder.h: a codec folder, or a
// Qwen3-TTS / Breeze TTS 2 model folder).
Result<SpeechEncoder> load_speech_encoder(const std::string& dir);

}  // namespace chorus::codec
