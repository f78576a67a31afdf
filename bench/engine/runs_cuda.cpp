#include "bench/engine/runs_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace chorus::bench {

using engine::StepResult;
using engine::SynthesisRequest;
using engine::TtsModel;
using engine::TtsStream;

void appendf(std::string& s, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s += buf;
}

std::string device_split(double second_ms, double first_ms, const char* second, const char* first) {
  std::string s;
  if (second_ms > 0)
    appendf(s, "%s %.3f ms + %s %.3f ms (device)", second, second_ms, first, first_ms);
  else
    appendf(s, "%.3f ms on the device (one graph per frame; --split-frames times the %s apart)", first_ms, second);
  return s;
}

Result<RunStats> run_batch(const TtsModel& m, int64_t B, int64_t frames, uint64_t seed, const RequestFn& request) {
  RunStats r;
  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<TtsStream>> owned;
  std::vector<TtsStream*> batch;
  for (int64_t i = 0; i < B; ++i) {
    CHORUS_ASSIGN(auto s, m.create_stream(request(seed + static_cast<uint64_t>(i), frames)));
    owned.push_back(std::move(s));
    batch.push_back(owned.back().get());
  }
  std::vector<StepResult> out(batch.size());
  CHORUS_TRY(m.step(batch, out, &r.times));
  r.first_ms = ms_since(t0);
  r.first = r.times;
  if (out[0].has_frame) r.codes.push_back(out[0].codes);
  const auto t1 = Clock::now();
  int64_t steps = 0;
  while (std::any_of(batch.begin(), batch.end(), [](auto* s) { return !s->finished(); })) {
    CHORUS_TRY(m.step(batch, out, &r.times));
    if (out[0].has_frame) r.codes.push_back(out[0].codes);
    ++steps;
  }
  r.step_ms = steps > 0 ? ms_since(t1) / static_cast<double>(steps) : 0.0;
  return r;
}

namespace {

// Times decode(frame) for each frame in turn.
template <class Decode>
Result<CodecStats> stream_frames(const std::vector<std::vector<int32_t>>& frames, Decode&& decode) {
  CodecStats r;
  for (size_t f = 0; f < frames.size(); ++f) {
    const auto tc = Clock::now();
    CHORUS_TRY(decode(frames[f].data()));
    const double ms = ms_since(tc);
    if (f == 0) r.first_ms = ms;
    r.mean_ms += ms;
  }
  r.mean_ms /= static_cast<double>(std::max<size_t>(1, frames.size()));
  return r;
}

}  // namespace

Result<CodecStats> cpu_codec_stream(const codec::Decoder& dec, const std::vector<std::vector<int32_t>>& frames) {
  codec::DecoderState st = dec.new_state();
  std::vector<float> pcm;
  return stream_frames(frames, [&](const int32_t* codes) { return dec.decode(st, codes, 1, pcm); });
}

Result<CodecStats> gpu_codec_stream(const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                                    const std::vector<std::vector<int32_t>>& frames) {
  CHORUS_TRY(dec.reset(st));
  std::vector<float> pcm;
  return stream_frames(frames, [&](const int32_t* codes) { return dec.decode(st, codes, 1, pcm); });
}

Result<FirstAudio> first_audio(const TtsModel& m, const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                               const RequestFn& request, int runs) {
  if (runs < 1) return make_error(ErrorCode::kInvalidArgument, "bench: first audio needs at least one run");
  std::vector<double> total, codes, prompt;
  std::vector<float> pcm;
  for (int i = 0; i < runs; ++i) {
    CHORUS_TRY(dec.reset(st));
    pcm.clear();
    const SynthesisRequest req = request(500 + static_cast<uint64_t>(i), 8);
    const auto t0 = Clock::now();
    CHORUS_ASSIGN(auto s, m.create_stream(req));
    prompt.push_back(ms_since(t0));
    TtsStream* one = s.get();
    std::vector<StepResult> out(1);
    CHORUS_TRY(m.step({&one, 1}, out));
    if (!out[0].has_frame) return make_error(ErrorCode::kInternal, "bench: the first step made no frame");
    codes.push_back(ms_since(t0));
    CHORUS_TRY(dec.decode(st, out[0].codes.data(), 1, pcm));
    total.push_back(ms_since(t0));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  FirstAudio r;
  r.best_ms = *std::min_element(total.begin(), total.end());
  r.median_ms = median(total);
  r.codes_median_ms = median(codes);
  r.prompt_median_ms = median(prompt);
  return r;
}

}  // namespace chorus::bench

#endif  // CHORUS_HAVE_CUDA
