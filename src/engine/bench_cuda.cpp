// `chorus bench --device cuda` (tts_model_cuda.h).
#include "engine/tts_model_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>

#include "engine/bench_runs_cuda.h"
#include "models/codec/decoder.h"
#include "models/codec/decoder_cuda.h"
#include "models/qwen3_tts/checkpoint.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"

namespace chorus::engine {

using namespace bench;

Result<std::string> cuda_bench(const CudaBenchOptions& o,
                               const std::function<SynthesisRequest(uint64_t, int64_t)>& request) {
  if (o.frames < 2 || o.batch_frames < 2 || o.warmup < 0)
    return make_error(ErrorCode::kInvalidArgument, "bench: --frames must be >= 2, --warmup >= 0");
  std::string rep;
  CHORUS_ASSIGN(const std::string dev, cuda::device_summary(0));
  if (o.stack_trace) cuda::decode_stack_enable_trace();
  const auto t_load = Clock::now();
  CHORUS_ASSIGN(auto model, load_cuda_tts_model(o.model, {.split_frames = o.split_frames}));
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
  appendf(rep, "single stream    %lld frames: %.3f ms per frame (wall, host included); %s\n", (long long)F,
          one.step_ms, device_split(talker_ms, cp_ms, "talker", "code predictor").c_str());
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
  rep += cuda::decode_stack_trace_report();  // empty without --stack-trace
  for (int64_t B : o.batches) {
    CHORUS_ASSIGN(const RunStats r, run_batch(*model, B, o.batch_frames, 1000, request));
    const double steps = static_cast<double>(o.batch_frames - 1);
    appendf(rep, "batch %4lld      step %.3f ms (%s), first step %.1f ms, aggregate %.1f real-time streams\n",
            (long long)B, r.step_ms,
            device_split((r.times.backbone_s - r.first.backbone_s) * 1e3 / steps,
                         (r.times.depth_s - r.first.depth_s) * 1e3 / steps, "talker", "code predictor")
                .c_str(),
            r.first_ms, static_cast<double>(B) * frame_ms / r.step_ms);
  }
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus over all runs\n", gib(cuda::memory_stats().peak));
  return rep;
}

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
