// The Qwen3-TTS Base speaker encoder (ECAPA-TDNN, qwen3_tts.md §4.4): 24 kHz mono audio -> log-mel
// features (audio::MelSpectrogram) -> x-vector of the talker's hidden size, the speaker slot of a
// voice-clone prompt.
//
//   block0: conv k5 + ReLU; blocks 1..3: SE-Res2Net (TDNN k1, Res2Net of dilated k3 convs, TDNN k1,
//   squeeze-excitation) with a residual skip; MFA: concat of blocks 1..3, conv + ReLU; attentive
//   statistics pooling; fc.
//
// Every conv pads "same" in reflect mode (d·(k−1)/2 mirrored columns each side), as the reference's
// padding="same", padding_mode="reflect". One immutable SpeakerEncoder (cheap to copy, shareable
// between threads) serves any number of calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/qwen3_tts/config.h"

namespace chorus::io {
class Checkpoint;
}

namespace chorus::qwen3_tts {

namespace detail {
struct SpeakerEncoderModel;
}

// Receives each stage's output as a row-major [rows, cols] matrix, named as in the reference
// goldens: "mel" [frames, mel_dim], "block0".."block3" [channels, frames], "mfa", "asp" [2C, 1].
using SpeakerTap = std::function<void(const std::string& stage, const float* data, int64_t rows, int64_t cols)>;

class SpeakerEncoder {
 public:
  // Needs a Base config (speaker_encoder_config) and checks every speaker_encoder.* tensor of
  // `main` against the table the config implies before building anything.
  static Result<SpeakerEncoder> load(const io::Checkpoint& main, const Config& config);

  int64_t dim() const;          // x-vector size (enc_dim = talker hidden)
  int64_t sample_rate() const;  // input rate (24000)
  int64_t min_samples() const;  // shortest input (reflect padding needs a few mel frames)
  static constexpr int64_t kMaxSamples = 24000 * 600;

  // nullptr: run on the calling thread only. Default: ThreadPool::global().
  void set_thread_pool(ThreadPool* pool) { pool_ = pool; }

  // Mono samples at sample_rate() -> x-vector [dim()]. kOutOfRange when shorter than min_samples(),
  // kInvalidArgument for a non-finite sample, kResourceExhausted past kMaxSamples.
  Result<std::vector<float>> embed(const float* samples, int64_t n, const SpeakerTap& tap = {}) const;
  // From log-mel features [frames, mel_dim] (row-major).
  Result<std::vector<float>> embed_mel(const float* mel, int64_t frames, const SpeakerTap& tap = {}) const;

 private:
  std::shared_ptr<const detail::SpeakerEncoderModel> model_;
  ThreadPool* pool_ = nullptr;
};

}  // namespace chorus::qwen3_tts
