#include "bench/engine/cuda_bench.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>

#include "bench/engine/runs_cuda.h"
#include "engine/tts_model_cuda.h"
#include "models/codec/codec_folder.h"
#include "models/codec/decoder_cuda.h"
#include "runtime/cpu/quant.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"

namespace chorus::bench {

Result<std::string> cuda_bench(const CudaBenchOptions& o, const RequestShape& shape) {
  if (o.frames < 2 || o.batch_frames < 2 || o.warmup < 0)
    return make_error(ErrorCode::kInvalidArgument, "bench: --frames must be >= 2, --warmup >= 0");
  CHORUS_ASSIGN(const BenchFamily fam, bench_family(o.model, shape));
  const char* second = fam.second_stage.c_str();
  const char* first = fam.first_stage.c_str();
  std::string rep;
  CHORUS_ASSIGN(const std::string dev, cuda::device_summary(0));
  if (o.stack_trace) cuda::decode_stack_enable_trace();
  const auto t_load = Clock::now();
  CHORUS_ASSIGN(auto model, engine::load_tts_model(o.model, {.device = engine::Device::cuda(0),
                                                              .weights = o.weights,
                                                              .batch_invariant = o.batch_invariant,
                                                              .split_frames = o.split_frames}));
  const double load_ms = ms_since(t_load);
  const size_t weights = cuda::memory_stats().current;
  CHORUS_ASSIGN(const codec::CodecModel codec, codec::load_codec(o.model));
  const double frame_ms = 1000.0 / model->info().frame_rate;

  appendf(rep, "device           %s\n", dev.c_str());
  appendf(rep, "model            %s (%s; load + upload %.0f ms, %.2f GiB of weights on the GPU)\n", o.model.c_str(),
          model->info().variant.c_str(), load_ms, gib(weights));
  appendf(rep, "weights          %s decoder layers (%s), embeddings and heads bf16: %.3f GiB on the GPU\n",
          cpu::weight_format_name(o.weights), o.weights == cpu::WeightFormat::kBf16 ? "as stored" : "quantised at load",
          gib(weights));
  if (!fam.work.empty()) appendf(rep, "work             %s\n", fam.work.c_str());

  if (o.warmup > 0) CHORUS_TRY(run_batch(*model, 1, std::max<int64_t>(2, o.warmup), 999, fam.request));
  cuda::reset_memory_peak();
  CHORUS_ASSIGN(const RunStats one, run_batch(*model, 1, o.frames, 1, fam.request));
  const size_t peak = cuda::memory_stats().peak;
  CHORUS_ASSIGN(const size_t in_use, cuda::device_bytes_in_use());

  CHORUS_ASSIGN(const CodecStats cc, cpu_codec_stream(codec.decoder, one.codes));
  // The GPU codec: weights uploaded once, one stream state allocated outside the timed part, warmed
  // up on the same frames.
  const size_t before_codec = cuda::memory_stats().current;
  CHORUS_ASSIGN(auto gpu_codec, codec::load_cuda_codec(o.model));
  CHORUS_ASSIGN(auto gpu_state, gpu_codec.new_state());
  const size_t codec_bytes = cuda::memory_stats().current - before_codec;
  CHORUS_TRY(gpu_codec_stream(gpu_codec, gpu_state, one.codes));  // warm-up
  CHORUS_ASSIGN(const CodecStats gc, gpu_codec_stream(gpu_codec, gpu_state, one.codes));
  CHORUS_ASSIGN(const FirstAudio fa, first_audio(*model, gpu_codec, gpu_state, fam.request, 10));

  const int64_t F = static_cast<int64_t>(one.codes.size());
  const double n = static_cast<double>(std::max<int64_t>(1, F - 1));
  const double second_ms = (one.times.backbone_s - one.first.backbone_s) * 1e3 / n;
  const double first_ms = (one.times.depth_s - one.first.depth_s) * 1e3 / n;
  appendf(rep, "single stream    %lld frames: %.3f ms per frame (wall, host included); %s\n", (long long)F,
          one.step_ms, device_split(second_ms, first_ms, second, first).c_str());
  appendf(rep, "codec            %.3f ms per frame on the GPU (wall, one frame per call; frame 0 %.3f ms; %.1f MiB of "
               "weights + one stream state %.1f MiB); %.3f ms per frame on the CPU (frame 0 %.3f ms)\n",
          gc.mean_ms, gc.first_ms, static_cast<double>(gpu_codec.weight_bytes()) / (1024.0 * 1024.0),
          static_cast<double>(codec_bytes - gpu_codec.weight_bytes()) / (1024.0 * 1024.0), cc.mean_ms, cc.first_ms);
  appendf(rep, "real-time factor %.4f generation only (%.0fx faster than real time); %.4f with the GPU codec in series, "
               "%.4f with the CPU codec\n",
          one.step_ms / frame_ms, frame_ms / one.step_ms, (one.step_ms + gc.mean_ms) / frame_ms,
          (one.step_ms + cc.mean_ms) / frame_ms);
  // Which decode path ran: persistent stack launches so far (0: every step went kernel by kernel).
  appendf(rep, "persistent decode-stack launches so far: %llu\n",
          static_cast<unsigned long long>(cuda::decode_stack_launches()));
  rep += cuda::decode_stack_trace_report();  // empty without stack_trace
  appendf(rep, "first frame      %.2f ms (request to frame 0's codes; prefill %.2f ms on the device)\n", one.first_ms,
          one.first.prefill_s * 1e3);
  appendf(rep, "first audio      %.2f ms median, %.2f ms best of 10 warm requests (prompt %.2f ms median, request -> "
               "frame 0's codes %.2f ms median -> frame 0's audio on the GPU); with the CPU codec %.2f ms\n",
          fa.median_ms, fa.best_ms, fa.prompt_median_ms, fa.codes_median_ms, one.first_ms + cc.first_ms);
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus in the single-stream run (weights %.3f GiB); %.3f GiB "
               "in use on the device incl. the CUDA context\n",
          gib(std::max(peak, weights)), gib(weights), gib(in_use));
  for (int64_t B : o.batches) {
    CHORUS_ASSIGN(const RunStats r, run_batch(*model, B, o.batch_frames, 1000, fam.request));
    const double steps = static_cast<double>(o.batch_frames - 1);
    appendf(rep, "batch %4lld      step %.3f ms (%s), first step %.1f ms, aggregate %.1f real-time streams\n",
            (long long)B, r.step_ms,
            device_split((r.times.backbone_s - r.first.backbone_s) * 1e3 / steps,
                         (r.times.depth_s - r.first.depth_s) * 1e3 / steps, second, first)
                .c_str(),
            r.first_ms, static_cast<double>(B) * frame_ms / r.step_ms);
  }
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus over all runs\n", gib(cuda::memory_stats().peak));
  return rep;
}

}  // namespace chorus::bench

#else  // no CUDA in this build

namespace chorus::bench {

Result<std::string> cuda_bench(const CudaBenchOptions&, const RequestShape&) {
  return make_error(ErrorCode::kUnsupported, "this chorus was built without CUDA");
}

}  // namespace chorus::bench

#endif
