// The 12.5 Hz speech-codec decoder on the GPU: the same network and the same streaming semantics
// as the CPU codec::Decoder (decoder.h, docs/codec.md "GPU decoder"), so decoding N frames at a
// time for any N equals one pass over the sequence (within float tolerance of the CPU decoder, the
// reference). Exact ("full") mode only.
//
// One immutable CudaDecoder (f32 weights on the device, with bf16 copies of the convolutions'
// when loaded with bf16 products; cheap to copy, shared by all streams)
// serves any number of CudaDecoderStates; each state owns only its device histories (conv inputs,
// transposed-conv overlaps, ring-buffer KV of the last window − 1 positions per layer, positions
// continuing across calls), a few MB (state_bytes()). The scratch and the CUDA streams belong to
// the decoder (shared by its copies), so a thousand streams cost a thousand histories and no
// handles. decode() steps one stream; decode_batch() steps many streams in one pass per step, all
// their columns in each kernel and each matrix product. Every kernel computes a stream's values
// with the same arithmetic whatever else is in the batch (the GEMM is batch-invariant, conv_ops.h),
// so a stream's samples are bit-identical whether it is decoded alone, in any batch, or in any
// chunking of its frames. Declared in every build; without CUDA, load functions return kUnsupported.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/codec/codec_config.h"

namespace chorus::io {
class Checkpoint;
}

namespace chorus::codec {

// True when this build has the CUDA backend.
bool cuda_decoder_built();

namespace detail {
struct CudaDecoderModel;
struct StreamHistory;
struct Workspaces;
}  // namespace detail

class CudaDecoderState {
 public:
  CudaDecoderState();
  ~CudaDecoderState();
  CudaDecoderState(CudaDecoderState&&) noexcept;
  CudaDecoderState& operator=(CudaDecoderState&&) noexcept;

  int64_t frames() const;  // frames decoded so far
  bool finished() const;
  bool valid() const { return impl_ != nullptr; }

 private:
  friend class CudaDecoder;
  std::unique_ptr<detail::StreamHistory> impl_;
};

class CudaDecoder {
 public:
  // Frames per internal step of states created by default (bounds a stream's device memory; the
  // output does not depend on it).
  static constexpr int64_t kDefaultBlockFrames = 8;
  // Frames one decode_batch() step holds in all (streams × frames each); its workspace, made on
  // the first decode_batch() call, takes about 12 MB per frame at real size.
  static constexpr int64_t kBatchFrames = 128;

  // Checks the checkpoint as codec::Decoder::load does, then uploads the decoder weights as f32 to
  // the current CUDA device. `precision`: of the matrix products (codec_config.h).
  static Result<CudaDecoder> load(const io::Checkpoint& ckpt, const CodecConfig& config,
                                  CodecPrecision precision = CodecPrecision::kF32);

  const CodecConfig& config() const;
  CodecPrecision precision() const;
  int64_t samples_per_frame() const { return config().samples_per_frame; }
  int64_t sample_rate() const { return config().sample_rate; }
  int64_t num_quantizers() const { return config().decoder.num_quantizers; }
  int64_t codebook_size() const { return config().decoder.codebook_size; }
  // Device bytes of the weights.
  size_t weight_bytes() const;
  // Device bytes one stream's own state takes with `block_frames`.
  size_t state_bytes(int64_t block_frames = kDefaultBlockFrames) const;

  // A fresh stream: allocates its device histories (state_bytes()). The shared scratch is made by
  // the first decode() of a block size (about 12 MB per block frame at real size).
  Result<CudaDecoderState> new_state(int64_t block_frames = kDefaultBlockFrames) const;
  // Makes `state` a fresh stream again without reallocating (histories, positions, frame count).
  Status reset(CudaDecoderState& state) const;

  // kOutOfRange naming the first bad code; kInvalidArgument for a negative frame count.
  Status validate_codes(const int32_t* codes, int64_t frames) const;
  // Decodes codes [frames, num_quantizers] (row-major, host memory) and appends frames ·
  // samples_per_frame samples to `out` (nothing is held back, as on the CPU). Codes are checked
  // first: on error nothing is appended and the state is unchanged. Waits for the device once per
  // internal step of block_frames frames.
  Status decode(CudaDecoderState& state, const int32_t* codes, int64_t frames, std::vector<float>& out) const;
  // Decodes the new frames of many streams in one pass per step: stream i gets codes[i]
  // [frames[i], num_quantizers] (frames[i] >= 0; any mix of counts and block sizes) and *outs[i]
  // gets exactly the samples decode(*states[i], codes[i], frames[i], *outs[i]) would append,
  // bit for bit. Steps hold up to kBatchFrames frames; streams are grouped by frames per step
  // (batch_plan.h: serving, one frame per stream, is one step per kBatchFrames streams).
  // Everything is checked before any state is touched — states made by this decoder, not flushed
  // or broken, no state or output twice, every code in range — and any failure fails the whole
  // call (the message names the stream) with nothing appended and no state changed. A device
  // error appends nothing to any output and leaves every stream that had stepped unusable (reset
  // it). Waits for the device once per step. Concurrent calls take turns.
  Status decode_batch(std::span<CudaDecoderState* const> states, std::span<const int32_t* const> codes,
                      std::span<const int64_t> frames, std::span<std::vector<float>* const> outs) const;
  // End of stream (adds no samples) and closes the state.
  Status flush(CudaDecoderState& state, std::vector<float>& out) const;

 private:
  std::shared_ptr<const detail::CudaDecoderModel> model_;
  std::shared_ptr<detail::Workspaces> work_;
};

// The GPU decoder of the codec that `dir` designates (as codec::load_codec: a codec folder, a
// Qwen3-TTS or a Breeze TTS 2 model folder).
Result<CudaDecoder> load_cuda_codec(const std::string& dir, CodecPrecision precision = CodecPrecision::kF32);

}  // namespace chorus::codec
