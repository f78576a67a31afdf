#include "engine/codec.h"

#include <mutex>

#include "models/codec/codec_folder.h"
#include "models/codec/decoder_cuda.h"

namespace chorus::engine {

namespace {

// One stream of either decoder: both stream with the same calls.
template <class Decoder, class State>
class DecoderStream : public CodecStream {
 public:
  using StateType = State;
  DecoderStream(const Decoder* d, State s) : d_(d), s_(std::move(s)) {}
  Status decode(const int32_t* codes, int64_t frames, std::vector<float>& out) override {
    return d_->decode(s_, codes, frames, out);
  }
  Status flush(std::vector<float>& out) override { return d_->flush(s_, out); }
  const Decoder* decoder() const { return d_; }
  State& state() { return s_; }

 private:
  const Decoder* d_;
  State s_;
};

// Codec::decode_streams through the decoder's decode_batch when every stream is one of its own;
// a failed call appended nothing, so one stream at a time then tells which stream failed and the
// others still get their samples.
template <class Stream, class Decoder>
std::vector<Status> decode_together(const Codec& codec, const Decoder& d, std::span<CodecStream* const> streams,
                                    std::span<const int32_t* const> codes, std::span<const int64_t> frames,
                                    std::span<std::vector<float>* const> outs) {
  std::vector<typename Stream::StateType*> states;
  states.reserve(streams.size());
  for (CodecStream* s : streams) {
    auto* own = dynamic_cast<Stream*>(s);
    if (!own || own->decoder() != &d) return codec.Codec::decode_streams(streams, codes, frames, outs);
    states.push_back(&own->state());
  }
  if (d.decode_batch(states, codes, frames, outs).ok()) return std::vector<Status>(streams.size(), ok_status());
  return codec.Codec::decode_streams(streams, codes, frames, outs);
}

class CpuCodec final : public Codec {
 public:
  explicit CpuCodec(codec::CodecModel m) : m_(std::move(m)) {}
  int64_t sample_rate() const override { return m_.decoder.sample_rate(); }
  int64_t samples_per_frame() const override { return m_.decoder.samples_per_frame(); }
  int64_t num_quantizers() const override { return m_.decoder.num_quantizers(); }
  int64_t codebook_size() const override { return m_.decoder.codebook_size(); }
  Status validate_codes(const int32_t* codes, int64_t frames) const override {
    return m_.decoder.validate_codes(codes, frames);
  }
  Result<std::unique_ptr<CodecStream>> new_stream(codec::DecodeMode mode) const override {
    return std::unique_ptr<CodecStream>(new DecoderStream<codec::Decoder, codec::DecoderState>(&m_.decoder, m_.decoder.new_state(mode)));
  }
  std::vector<Status> decode_streams(std::span<CodecStream* const> streams, std::span<const int32_t* const> codes,
                                     std::span<const int64_t> frames,
                                     std::span<std::vector<float>* const> outs) const override {
    return decode_together<DecoderStream<codec::Decoder, codec::DecoderState>>(*this, m_.decoder, streams, codes, frames,
                                                                               outs);
  }
  codec::Decoder& decoder() { return m_.decoder; }

 private:
  codec::CodecModel m_;
};

using GpuStream = DecoderStream<codec::CudaDecoder, codec::CudaDecoderState>;

// Decoder states of ended streams, kept for the next streams until the codec goes: a cudaFree per
// ended request would wait for the whole device (the generator's frame in flight included) on the
// scheduler's thread, ~14 ms each at real size. So the states (~6 MiB each) number at most the
// most streams this codec ever had at once, and memory at that peak stays reserved for the next.
struct KeptStates {
  std::mutex mu;
  std::vector<codec::CudaDecoderState> states;
};

// A GPU stream whose state goes back to the kept states when it ends.
class KeptGpuStream final : public GpuStream {
 public:
  KeptGpuStream(const codec::CudaDecoder* d, codec::CudaDecoderState s, std::shared_ptr<KeptStates> kept)
      : GpuStream(d, std::move(s)), kept_(std::move(kept)) {}
  ~KeptGpuStream() override {
    std::lock_guard<std::mutex> lock(kept_->mu);
    kept_->states.push_back(std::move(state()));
  }

 private:
  std::shared_ptr<KeptStates> kept_;
};

class GpuCodec final : public Codec {
 public:
  explicit GpuCodec(codec::CudaDecoder d) : d_(std::move(d)) {}
  int64_t sample_rate() const override { return d_.sample_rate(); }
  int64_t samples_per_frame() const override { return d_.samples_per_frame(); }
  int64_t num_quantizers() const override { return d_.num_quantizers(); }
  int64_t codebook_size() const override { return d_.codebook_size(); }
  Status validate_codes(const int32_t* codes, int64_t frames) const override { return d_.validate_codes(codes, frames); }
  Result<std::unique_ptr<CodecStream>> new_stream(codec::DecodeMode mode) const override {
    if (mode != codec::DecodeMode::kExact)
      return make_error(ErrorCode::kUnsupported, "the GPU codec decodes in the exact (full) mode only");
    codec::CudaDecoderState s;
    {
      std::lock_guard<std::mutex> lock(kept_->mu);
      if (!kept_->states.empty()) {
        s = std::move(kept_->states.back());
        kept_->states.pop_back();
      }
    }
    if (s.valid()) {
      CHORUS_TRY(d_.reset(s));  // a fresh stream again: histories zeroed, positions back to 0
    } else {
      CHORUS_ASSIGN(s, d_.new_state());
    }
    return std::unique_ptr<CodecStream>(new KeptGpuStream(&d_, std::move(s), kept_));
  }
  bool on_gpu() const override { return true; }
  size_t kept_states() const override {
    std::lock_guard<std::mutex> lock(kept_->mu);
    return kept_->states.size();
  }
  std::vector<Status> decode_streams(std::span<CodecStream* const> streams, std::span<const int32_t* const> codes,
                                     std::span<const int64_t> frames,
                                     std::span<std::vector<float>* const> outs) const override {
    return decode_together<GpuStream>(*this, d_, streams, codes, frames, outs);
  }
  // Both paths once: decode() and decode_batch() (whose first call makes the batch workspace, about
  // 1.5 GiB at real size, here rather than in a request's first step).
  Status warm_up() const {
    CHORUS_ASSIGN(codec::CudaDecoderState s, d_.new_state());
    CHORUS_ASSIGN(codec::CudaDecoderState t, d_.new_state());
    const std::vector<int32_t> zeros(static_cast<size_t>(d_.num_quantizers()), 0);
    std::vector<float> out;
    CHORUS_TRY(d_.decode(s, zeros.data(), 1, out));
    codec::CudaDecoderState* states[] = {&t};
    const int32_t* codes[] = {zeros.data()};
    const int64_t frames[] = {1};
    std::vector<float>* outs[] = {&out};
    return d_.decode_batch(states, codes, frames, outs);
  }

 private:
  codec::CudaDecoder d_;
  std::shared_ptr<KeptStates> kept_ = std::make_shared<KeptStates>();
};

}  // namespace

std::vector<Status> Codec::decode_streams(std::span<CodecStream* const> streams, std::span<const int32_t* const> codes,
                                          std::span<const int64_t> frames,
                                          std::span<std::vector<float>* const> outs) const {
  if (codes.size() != streams.size() || frames.size() != streams.size() || outs.size() != streams.size())
    return std::vector<Status>(streams.size(), make_error(ErrorCode::kInvalidArgument,
                                                          "decode_streams: streams, codes, frames and outputs differ in number"));
  std::vector<Status> st;
  st.reserve(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    if (!streams[i] || !outs[i]) st.push_back(make_error(ErrorCode::kInvalidArgument, "decode_streams: no stream or output"));
    else st.push_back(streams[i]->decode(codes[i], frames[i], *outs[i]));
  }
  return st;
}

Result<std::unique_ptr<Codec>> load_codec(const std::string& dir, Device device, ThreadPool* pool,
                                          codec::CodecPrecision precision) {
  if (device.is_cuda()) {
    CHORUS_ASSIGN(codec::CudaDecoder d, codec::load_cuda_codec(dir, precision));
    auto c = std::make_unique<GpuCodec>(std::move(d));
    CHORUS_TRY(c->warm_up());
    return std::unique_ptr<Codec>(std::move(c));
  }
  if (precision != codec::CodecPrecision::kF32)
    return make_error(ErrorCode::kInvalidArgument, std::string("codec precision ") +
                                                       codec::codec_precision_name(precision) +
                                                       ": the CPU codec computes in f32 (bf16 is for the GPU codec)");
  CHORUS_ASSIGN(codec::CodecModel m, codec::load_codec(dir));
  auto c = std::make_unique<CpuCodec>(std::move(m));
  c->decoder().set_thread_pool(pool);
  return std::unique_ptr<Codec>(std::move(c));
}

}  // namespace chorus::engine
