// `chorus bench --device cuda` (tts_model_cuda.h).
#include "engine/tts_model_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>

#include "models/codec/decoder.h"
#include "models/codec/decoder_cuda.h"
#include "models/qwen3_tts/checkpoint.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::engine {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void appendf(std::string& s, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s += buf;
}

double gib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0); }

struct RunStats {
  double first_ms = 0;   // create_stream + first step (prefill, frame 0)
  double step_ms = 0;    // mean wall time of the later steps
  StageTimes times, first;
  std::vector<std::vector<int32_t>> codes;  // stream 0's frames
};

Result<RunStats> run_batch(const TtsModel& m, int64_t B, int64_t frames, uint64_t seed,
                           const std::function<SynthesisRequest(uint64_t, int64_t)>& request) {
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

// Codec on the GPU, streamed frame by frame as a player would: the first frame's and the mean time.
struct GpuCodecStats {
  double first_ms = 0, mean_ms = 0;
};
Result<GpuCodecStats> gpu_codec_stream(const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                                       const std::vector<std::vector<int32_t>>& frames) {
  GpuCodecStats r;
  CHORUS_TRY(dec.reset(st));
  std::vector<float> pcm;
  for (size_t f = 0; f < frames.size(); ++f) {
    const auto tc = Clock::now();
    CHORUS_TRY(dec.decode(st, frames[f].data(), 1, pcm));
    const double ms = ms_since(tc);
    if (f == 0) r.first_ms = ms;
    r.mean_ms += ms;
  }
  r.mean_ms /= static_cast<double>(std::max<size_t>(1, frames.size()));
  return r;
}

// Request → frame 0's codes → frame 0's audio on the GPU, warm: a new stream per request, the
// codec state reused (reset) as a server would pool it. Best and median of `runs`.
struct FirstAudio {
  double best_ms = 0, median_ms = 0, codes_median_ms = 0;
};
Result<FirstAudio> first_audio(const TtsModel& m, const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                               const std::function<SynthesisRequest(uint64_t, int64_t)>& request, int runs) {
  std::vector<double> total, codes;
  std::vector<float> pcm;
  for (int i = 0; i < runs; ++i) {
    CHORUS_TRY(dec.reset(st));
    pcm.clear();
    const SynthesisRequest req = request(500 + static_cast<uint64_t>(i), 8);
    const auto t0 = Clock::now();
    CHORUS_ASSIGN(auto s, m.create_stream(req));
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
  return r;
}

}  // namespace

Result<std::string> cuda_bench(const CudaBenchOptions& o,
                               const std::function<SynthesisRequest(uint64_t, int64_t)>& request) {
  if (o.frames < 2 || o.batch_frames < 2 || o.warmup < 0)
    return make_error(ErrorCode::kInvalidArgument, "bench: --frames must be >= 2, --warmup >= 0");
  std::string rep;
  CHORUS_ASSIGN(const std::string dev, cuda::device_summary(0));
  const auto t_load = Clock::now();
  CHORUS_ASSIGN(auto model, load_cuda_tts_model(o.model));
  const double load_ms = ms_since(t_load);
  const size_t weights = cuda::memory_stats().current;
  CHORUS_ASSIGN(auto files, qwen3_tts::open_model_files(o.model));
  CHORUS_ASSIGN(auto codec, codec::Decoder::load(files.codec, files.config.codec));
  const double frame_ms = 1000.0 / model->info().frame_rate;

  appendf(rep, "device           %s\n", dev.c_str());
  appendf(rep, "model            %s (%s; load + upload %.0f ms, %.2f GiB of weights on the GPU)\n", o.model.c_str(),
          model->info().variant.c_str(), load_ms, gib(weights));

  if (o.warmup > 0) {
    auto w = run_batch(*model, 1, std::max<int64_t>(2, o.warmup), 999, request);
    if (!w.ok()) return std::move(w).error();
  }
  CHORUS_ASSIGN(const RunStats one, run_batch(*model, 1, o.frames, 1, request));
  const size_t peak = cuda::memory_stats().peak;
  CHORUS_ASSIGN(const size_t in_use, cuda::device_bytes_in_use());

  // Codec on the CPU, streamed frame by frame as a player would.
  const int64_t F = static_cast<int64_t>(one.codes.size());
  double codec_first_ms = 0, codec_total_ms = 0;
  {
    codec::DecoderState st = codec.new_state();
    std::vector<float> pcm;
    for (int64_t f = 0; f < F; ++f) {
      const auto tc = Clock::now();
      CHORUS_TRY(codec.decode(st, one.codes[static_cast<size_t>(f)].data(), 1, pcm));
      const double ms = ms_since(tc);
      if (f == 0) codec_first_ms = ms;
      codec_total_ms += ms;
    }
  }
  // Codec on the GPU: weights uploaded once, one stream state (allocated outside the timed part),
  // warmed up on a few frames.
  const size_t before_codec = cuda::memory_stats().current;
  CHORUS_ASSIGN(auto gpu_codec, codec::CudaDecoder::load(files.codec, files.config.codec));
  CHORUS_ASSIGN(auto gpu_state, gpu_codec.new_state());
  const size_t codec_bytes = cuda::memory_stats().current - before_codec;
  CHORUS_TRY(gpu_codec_stream(gpu_codec, gpu_state, one.codes));  // warm-up
  CHORUS_ASSIGN(const GpuCodecStats gc, gpu_codec_stream(gpu_codec, gpu_state, one.codes));
  CHORUS_ASSIGN(const FirstAudio fa, first_audio(*model, gpu_codec, gpu_state, request, 10));

  const double n = static_cast<double>(std::max<int64_t>(1, F - 1));
  const double talker_ms = (one.times.backbone_s - one.first.backbone_s) * 1e3 / n;
  const double cp_ms = (one.times.depth_s - one.first.depth_s) * 1e3 / n;
  const double cpu_codec_ms = codec_total_ms / static_cast<double>(std::max<int64_t>(1, F));
  appendf(rep, "single stream    %lld frames: %.3f ms per frame (wall, host included) = talker %.3f ms + code predictor "
               "%.3f ms (device)\n",
          (long long)F, one.step_ms, talker_ms, cp_ms);
  appendf(rep, "codec            %.3f ms per frame on the GPU (wall, one frame per call; frame 0 %.3f ms; %.1f MiB of "
               "f32 weights + one stream state %.1f MiB); %.3f ms per frame on the CPU (frame 0 %.3f ms)\n",
          gc.mean_ms, gc.first_ms, static_cast<double>(gpu_codec.weight_bytes()) / (1024.0 * 1024.0),
          static_cast<double>(codec_bytes - gpu_codec.weight_bytes()) / (1024.0 * 1024.0), cpu_codec_ms, codec_first_ms);
  appendf(rep, "real-time factor %.4f generation only (%.0fx faster than real time); %.4f with the GPU codec in series, "
               "%.4f with the CPU codec\n",
          one.step_ms / frame_ms, frame_ms / one.step_ms, (one.step_ms + gc.mean_ms) / frame_ms,
          (one.step_ms + cpu_codec_ms) / frame_ms);
  appendf(rep, "first frame      %.2f ms (request to frame 0's codes; prefill %.2f ms on the device)\n", one.first_ms,
          one.first.prefill_s * 1e3);
  appendf(rep, "first audio      %.2f ms median, %.2f ms best of 10 warm requests (request -> frame 0's codes %.2f ms "
               "median -> frame 0's audio on the GPU); with the CPU codec %.2f ms\n",
          fa.median_ms, fa.best_ms, fa.codes_median_ms, one.first_ms + codec_first_ms);
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus (weights %.3f GiB); %.3f GiB in use on the device "
               "incl. the CUDA context\n",
          gib(peak), gib(weights), gib(in_use));
  for (int64_t B : o.batches) {
    CHORUS_ASSIGN(const RunStats r, run_batch(*model, B, o.batch_frames, 1000, request));
    const double steps = static_cast<double>(o.batch_frames - 1);
    appendf(rep, "batch %4lld      step %.3f ms (talker %.3f + code predictor %.3f device), first step %.1f ms, "
                 "aggregate %.1f real-time streams\n",
            (long long)B, r.step_ms, (r.times.backbone_s - r.first.backbone_s) * 1e3 / steps,
            (r.times.depth_s - r.first.depth_s) * 1e3 / steps, r.first_ms,
            static_cast<double>(B) * frame_ms / r.step_ms);
  }
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus over all runs\n", gib(cuda::memory_stats().peak));
  return rep;
}

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
