// The 12.5 Hz speech-codec decoder (Qwen3-TTS speech_tokenizer/, Breeze TTS 2 audio_tokenizer/):
// frames of num_quantizers codes -> 24 kHz audio, samples_per_frame (1920) samples per frame.
// See qwen3_tts.md §4 and docs/codec.md.
//
// One immutable Decoder (weights; cheap to copy, shareable between threads) serves any number of
// streams, each with its own DecoderState (convolution histories, per-layer sliding-window KV
// caches). Two modes:
//   kExact            decoding N frames at a time, for any N >= 1 and any sequence length, gives
//                     bitwise the samples of one pass over the whole sequence (same build, same
//                     CPU kernels). Memory per stream is bounded (no cache cap, no re-priming).
//   kOfficialChunked  what the official Qwen3TTSTokenizer.decode returns: independent decodes of
//                     300-frame chunks, each primed with the 25 frames before it. Also streamed.
// The whole decoder is causal and its transposed convolutions trim their right overhang, so the
// 1920 samples of frame t are final as soon as frame t is decoded: nothing is held back
// (kHeldBackSamples = 0) and flush() never adds samples.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
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

enum class DecodeMode { kExact, kOfficialChunked };
// "full" (also "exact") or "official-chunked".
Result<DecodeMode> decode_mode_from_name(const std::string& name);
const char* decode_mode_name(DecodeMode mode);

struct OfficialChunking {
  int64_t chunk_frames = 300;
  int64_t left_context = 25;  // must be < chunk_frames
};

using detail::StageTap;

namespace detail {
struct DecoderModel;
struct StreamCaches;
}  // namespace detail

class DecoderState {
 public:
  DecoderState();
  ~DecoderState();
  DecoderState(DecoderState&&) noexcept;
  DecoderState& operator=(DecoderState&&) noexcept;

  int64_t frames() const { return frames_; }  // frames decoded so far
  DecodeMode mode() const { return mode_; }
  bool finished() const { return finished_; }
  // Receives every stage's output ([channels, steps], channels-first) of the frames decoded from
  // now on; names as in the reference goldens: dequant, pre_conv, pre_transformer, upsample{i}_0,
  // upsample{i}_1, decoder0 ... decoder{n+2}. For tests and debugging.
  void set_tap(StageTap tap) { tap_ = std::move(tap); }

 private:
  friend class Decoder;
  const detail::DecoderModel* owner_ = nullptr;
  DecodeMode mode_ = DecodeMode::kExact;
  OfficialChunking chunking_;
  int64_t block_frames_ = 0;
  std::unique_ptr<detail::StreamCaches> current_;
  std::unique_ptr<detail::StreamCaches> next_;  // official mode: the next chunk, being primed
  int64_t current_start_ = 0;                   // official mode: first frame of current_'s chunk
  int64_t frames_ = 0;
  bool finished_ = false;
  StageTap tap_;
};

class Decoder {
 public:
  // Output samples of frame t that still wait for frame t + 1 (none: see the file comment).
  static constexpr int64_t kHeldBackSamples = 0;

  // Checks every decoder tensor of `ckpt` against the table the config implies, then builds the
  // stages. Encoder tensors, if present, are ignored.
  static Result<Decoder> load(const io::Checkpoint& ckpt, const CodecConfig& config);

  const CodecConfig& config() const;
  int64_t samples_per_frame() const { return config().samples_per_frame; }
  int64_t sample_rate() const { return config().sample_rate; }
  int64_t num_quantizers() const { return config().decoder.num_quantizers; }
  int64_t codebook_size() const { return config().decoder.codebook_size; }

  // nullptr: run on the calling thread only. Default: ThreadPool::global().
  void set_thread_pool(ThreadPool* pool) { pool_ = pool; }
  // Frames decoded per internal step by states created afterwards (default 4). Bounds a stream's
  // memory; the output does not depend on it.
  Status set_block_frames(int64_t frames);

  DecoderState new_state(DecodeMode mode = DecodeMode::kExact, OfficialChunking chunking = {}) const;

  // kOutOfRange naming the first bad code; kInvalidArgument for a negative frame count.
  Status validate_codes(const int32_t* codes, int64_t frames) const;
  // Decodes codes [frames, num_quantizers] (row-major) and appends the samples that are now final
  // to `out`. On error nothing is appended and the state is unchanged. frames == 0 is a no-op.
  Status decode(DecoderState& state, const int32_t* codes, int64_t frames, std::vector<float>& out) const;
  // Decodes codes[i] [frames[i], num_quantizers] of the distinct streams states[i] and appends to
  // *outs[i] exactly what decode() would append: the exact-mode streams go through the stages
  // together, each weight read once per round for all of them (a stream's samples do not depend
  // on its batch); official-mode streams one by one. Everything is checked first: on error
  // nothing is appended and no state changes.
  Status decode_batch(std::span<DecoderState* const> states, std::span<const int32_t* const> codes,
                      std::span<const int64_t> frames, std::span<std::vector<float>* const> outs) const;
  // End of stream: appends the samples still held back (none for this codec) and closes the state.
  Status flush(DecoderState& state, std::vector<float>& out) const;
  // The whole sequence at once (a new state, decode, flush). Empty input is an error.
  Result<std::vector<float>> decode_all(const int32_t* codes, int64_t frames,
                                        DecodeMode mode = DecodeMode::kExact,
                                        OfficialChunking chunking = {}) const;

 private:
  Status decode_official(DecoderState& state, const int32_t* codes, int64_t frames, std::vector<float>& out) const;
  std::unique_ptr<detail::StreamCaches> new_caches(int64_t block_frames) const;
  // Runs frames through one set of caches in steps of at most their block size.
  void run(detail::StreamCaches& caches, const int32_t* codes, int64_t frames, std::vector<float>& out,
           const StageTap* tap) const;
  // The same for several streams' caches in rounds of each one's block; `work` lends the
  // activation buffers (with one stream, its own caches). `tap` only with one stream.
  void run_batch(std::span<detail::StreamCaches* const> caches, std::span<const int32_t* const> codes,
                 std::span<const int64_t> frames, std::span<std::vector<float>* const> outs,
                 detail::StreamCaches& work, const StageTap* tap) const;

  std::shared_ptr<const detail::DecoderModel> model_;
  ThreadPool* pool_ = nullptr;
  int64_t block_frames_ = 4;
};

}  // namespace chorus::codec
