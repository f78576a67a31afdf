// Streams: input checks, the exact mode (one set of caches for the whole stream) and the
// official-compatible chunked mode (a fresh set per 300-frame chunk, primed on the 25 frames
// before the chunk while the previous chunk is still being emitted).
#include "models/codec/decoder.h"
#include "models/codec/decoder_model.h"

namespace chorus::codec {

using detail::StreamCaches;

Result<DecodeMode> decode_mode_from_name(const std::string& name) {
  if (name == "full" || name == "exact") return DecodeMode::kExact;
  if (name == "official-chunked") return DecodeMode::kOfficialChunked;
  return make_error(ErrorCode::kInvalidArgument,
                    "decode mode must be full or official-chunked (got \"" + name + "\")");
}

const char* decode_mode_name(DecodeMode mode) {
  return mode == DecodeMode::kExact ? "full" : "official-chunked";
}

DecoderState::DecoderState() = default;
DecoderState::~DecoderState() = default;
DecoderState::DecoderState(DecoderState&&) noexcept = default;
DecoderState& DecoderState::operator=(DecoderState&&) noexcept = default;

DecoderState Decoder::new_state(DecodeMode mode, OfficialChunking chunking) const {
  DecoderState s;
  s.owner_ = model_.get();
  s.mode_ = mode;
  s.chunking_ = chunking;
  s.block_frames_ = block_frames_;
  s.current_ = new_caches(block_frames_);
  return s;
}

Status Decoder::validate_codes(const int32_t* codes, int64_t frames) const {
  if (frames < 0) return make_error(ErrorCode::kInvalidArgument, "negative frame count");
  if (frames > 0 && codes == nullptr) return make_error(ErrorCode::kInvalidArgument, "no codes given");
  const int64_t Q = num_quantizers(), size = codebook_size();
  for (int64_t t = 0; t < frames; ++t)
    for (int64_t k = 0; k < Q; ++k) {
      const int32_t c = codes[t * Q + k];
      if (c < 0 || c >= size)
        return make_error(ErrorCode::kOutOfRange,
                          "frame " + std::to_string(t) + ", codebook " + std::to_string(k) + ": code " +
                              std::to_string(c) + " is outside [0, " + std::to_string(size - 1) + "]");
    }
  return ok_status();
}

Status Decoder::decode(DecoderState& state, const int32_t* codes, int64_t frames,
                       std::vector<float>& out) const {
  DecoderState* states[] = {&state};
  const int32_t* of[] = {codes};
  const int64_t counts[] = {frames};
  std::vector<float>* outs[] = {&out};
  return decode_batch(states, of, counts, outs);
}

Status Decoder::decode_official(DecoderState& state, const int32_t* codes, int64_t frames,
                                std::vector<float>& out) const {
  // decode_batch has checked the chunking.
  const int64_t C = state.chunking_.chunk_frames, L = state.chunking_.left_context;
  const int64_t Q = num_quantizers();
  std::vector<float> discarded;
  int64_t done = 0;
  while (done < frames) {
    const int64_t p = state.frames_;
    const int64_t chunk_start = p / C * C;
    if (chunk_start != state.current_start_) {  // a chunk boundary: the primed caches take over
      state.current_ = state.next_ ? std::move(state.next_) : new_caches(state.block_frames_);
      state.current_start_ = chunk_start;
    }
    // The next chunk starts at s and is decoded with frames [s − L, s) as its left context.
    const int64_t next_start = chunk_start + C, prime_from = next_start - L;
    const int32_t* seg_codes = codes + done * Q;
    int64_t seg;
    if (p < prime_from) {
      seg = std::min(frames - done, prime_from - p);
    } else {
      seg = std::min(frames - done, next_start - p);
      if (!state.next_) state.next_ = new_caches(state.block_frames_);
      discarded.clear();
      run(*state.next_, seg_codes, seg, discarded, nullptr);
    }
    run(*state.current_, seg_codes, seg, out, &state.tap_);
    state.frames_ += seg;
    done += seg;
  }
  return ok_status();
}

Status Decoder::flush(DecoderState& state, std::vector<float>& out) const {
  if (state.owner_ != model_.get())
    return make_error(ErrorCode::kInvalidArgument, "decoder state was not made by this decoder");
  // Every sample is final when its frame is decoded (kHeldBackSamples = 0): nothing to add.
  state.finished_ = true;
  state.next_.reset();
  return ok_status();
}

Result<std::vector<float>> Decoder::decode_all(const int32_t* codes, int64_t frames, DecodeMode mode,
                                               OfficialChunking chunking) const {
  if (frames == 0) return make_error(ErrorCode::kInvalidArgument, "no frames to decode");
  DecoderState state = new_state(mode, chunking);
  std::vector<float> out;
  CHORUS_TRY(decode(state, codes, frames, out));
  CHORUS_TRY(flush(state, out));
  return out;
}

}  // namespace chorus::codec
