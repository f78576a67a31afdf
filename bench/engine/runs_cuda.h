// The measurements of `chorus bench --device cuda` (cuda_bench.h): timed batches, the GPU codec
// streamed frame by frame, and time to first audio. Built only with CUDA.
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/request.h"
#include "engine/tts_model.h"
#include "models/codec/decoder.h"
#include "models/codec/decoder_cuda.h"

namespace chorus::bench {

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
inline double gib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }
void appendf(std::string& s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A frame's device time per half, from StageTimes' two figures: "<second> S ms + <first> F ms
// (device)", or, when the frame ran as one graph (the second half's time is then inside the first's
// and the second's is 0; FrameTiming), the unsplit time and how --split-frames splits it.
// second: "talker" / "backbone"; first: "code predictor" / "depth decoder".
std::string device_split(double second_ms, double first_ms, const char* second, const char* first);

// Makes the request of one stream: (seed, frames) -> request.
using RequestFn = std::function<engine::SynthesisRequest(uint64_t seed, int64_t frames)>;

struct RunStats {
  double first_ms = 0;  // create_stream + first step (prefill, frame 0)
  double step_ms = 0;   // mean wall time of the later steps
  engine::StageTimes times, first;
  std::vector<std::vector<int32_t>> codes;  // stream 0's frames
};
// B streams of `frames` frames each (seeds seed, seed + 1, ...), stepped together to the end.
Result<RunStats> run_batch(const engine::TtsModel& m, int64_t B, int64_t frames, uint64_t seed, const RequestFn& request);

// A codec streamed frame by frame as a player would: frame 0's and the mean time per frame.
struct CodecStats {
  double first_ms = 0, mean_ms = 0;
};
// The CPU codec, a fresh stream.
Result<CodecStats> cpu_codec_stream(const codec::Decoder& dec, const std::vector<std::vector<int32_t>>& frames);
// The GPU codec, the stream `st` reset first.
Result<CodecStats> gpu_codec_stream(const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                                    const std::vector<std::vector<int32_t>>& frames);

// Request → frame 0's codes → frame 0's audio on the GPU, warm: a new stream per request, the codec
// state reused (reset) as a server would pool it. Best and medians of `runs`; `prompt` is
// create_stream alone.
struct FirstAudio {
  double best_ms = 0, median_ms = 0, codes_median_ms = 0, prompt_median_ms = 0;
};
Result<FirstAudio> first_audio(const engine::TtsModel& m, const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                               const RequestFn& request, int runs);

}  // namespace chorus::bench

#endif  // CHORUS_HAVE_CUDA
