// The speech codec of a loaded model as the engine uses it: one immutable decoder on the model's
// device, and one CodecStream per request turning its frames into 24 kHz samples as they come.
// Both backends stream exactly: decoding frames one at a time equals one pass over the sequence
// (models/codec/decoder.h, decoder_cuda.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/device.h"
#include "models/codec/decoder.h"

namespace chorus::engine {

class CodecStream {
 public:
  virtual ~CodecStream() = default;
  // Decodes codes [frames, num_quantizers] and appends the samples that are now final to `out`.
  virtual Status decode(const int32_t* codes, int64_t frames, std::vector<float>& out) = 0;
  // End of stream: appends what is still held back (nothing for this codec).
  virtual Status flush(std::vector<float>& out) = 0;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual int64_t sample_rate() const = 0;
  virtual int64_t samples_per_frame() const = 0;
  virtual int64_t num_quantizers() const = 0;
  virtual int64_t codebook_size() const = 0;
  // kOutOfRange naming the first bad code.
  virtual Status validate_codes(const int32_t* codes, int64_t frames) const = 0;
  // A fresh stream. The GPU decoder has the exact mode only (kUnsupported otherwise).
  virtual Result<std::unique_ptr<CodecStream>> new_stream(codec::DecodeMode mode = codec::DecodeMode::kExact) const = 0;

  // Whether the codec runs on a GPU (beside a generator that may share it).
  virtual bool on_gpu() const { return false; }
  // Decoder states of ended streams kept for new ones (the GPU codec keeps every one until it is
  // destroyed, reset before reuse; each holds state device memory).
  virtual size_t kept_states() const { return 0; }
  // Decodes codes[i] [frames[i], num_quantizers] of streams[i] (streams of this codec, each at
  // most once) and appends to *outs[i] exactly what streams[i]->decode() would append, with
  // the status of each stream. One stream's bad codes or error never changes another's output.
  // Here: one stream after another. Both codecs decode their own streams together (the CPU's
  // Decoder::decode_batch, the GPU's CudaDecoder::decode_batch: each weight read once for all of
  // them) and, should that fail, one by one, so each stream gets its own status.
  virtual std::vector<Status> decode_streams(std::span<CodecStream* const> streams,
                                             std::span<const int32_t* const> codes, std::span<const int64_t> frames,
                                             std::span<std::vector<float>* const> outs) const;
};

// The codec of the checkpoint folder `dir` (codec::find_codec_dir), on `device`. The GPU decoder
// runs a throw-away frame at load, alone and batched, so that no request pays for loading its
// kernels or making its workspaces. `precision`: the GPU decoder's matrix products; bf16 on the
// CPU is kInvalidArgument (its codec is f32).
Result<std::unique_ptr<Codec>> load_codec(const std::string& dir, Device device, ThreadPool* pool,
                                          codec::CodecPrecision precision = codec::CodecPrecision::kF32);

}  // namespace chorus::engine
