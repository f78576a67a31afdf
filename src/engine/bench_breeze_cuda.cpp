// `chorus bench --device cuda` for Breeze TTS 2 checkpoints (breeze_engine_cuda.h).
#include "engine/breeze_engine_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <random>

#include "engine/bench_runs_cuda.h"
#include "models/breeze_tts/config.h"
#include "models/codec/codec_folder.h"
#include "models/codec/decoder_cuda.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/decode_stack.h"

namespace chorus::engine {

using namespace bench;

namespace {

// Random ids below every special id of the checkpoint (tiny checkpoints remap them into a small vocabulary).
SynthesisRequest bench_request(const breeze_tts::Config& c, const BreezeBenchOptions& o, uint64_t seed, int64_t frames) {
  int64_t top = std::min({c.text_vocab, c.ids.audio, c.ids.audio_eos, c.ids.ins_bos, c.ids.ins_eos});
  for (const int64_t s : c.ids.speakers) top = std::min(top, s);
  if (c.text_encoder.eoi_token_id >= 0) top = std::min(top, c.text_encoder.eoi_token_id);
  const int32_t lo = static_cast<int32_t>(std::min<int64_t>(3, top - 1));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(lo, static_cast<int32_t>(std::max<int64_t>(lo, top - 1)));
  SynthesisRequest r;
  for (int64_t i = 0; i < o.text_tokens; ++i) r.text_ids.push_back(tok(rng));
  if (o.cfg_scale != 1.0f) {
    for (int64_t i = 0; i < o.instruct_tokens; ++i) r.instruct_ids.push_back(tok(rng));
    r.cfg_scale = o.cfg_scale;
  }
  if (o.greedy) r.sampler.greedy = r.depth_sampler.greedy = true;
  r.max_frames = frames;
  r.min_frames = frames;
  r.length_cap.frames_per_token = 0;
  r.seed = seed;
  r.activations = o.activations;
  return r;
}

}  // namespace

Result<std::string> cuda_bench_breeze(const BreezeBenchOptions& o) {
  const CudaBenchOptions& b = o.base;
  if (b.frames < 2 || b.batch_frames < 2 || b.warmup < 0)
    return make_error(ErrorCode::kInvalidArgument, "bench: --frames must be >= 2, --warmup >= 0");
  std::string rep;
  CHORUS_ASSIGN(const std::string dev, cuda::device_summary(0));
  if (b.stack_trace) cuda::decode_stack_enable_trace();
  const auto t_load = Clock::now();
  CHORUS_ASSIGN(auto model, load_cuda_breeze_model(b.model, {.split_frames = b.split_frames}));
  const double load_ms = ms_since(t_load);
  const size_t weights = cuda::memory_stats().current;
  CHORUS_ASSIGN(const breeze_tts::Config c, breeze_tts::load_config(b.model));
  const RequestFn request = [&](uint64_t seed, int64_t frames) { return bench_request(c, o, seed, frames); };
  CHORUS_ASSIGN(auto codec, codec::load_codec(b.model));
  const double frame_ms = 1000.0 / model->info().frame_rate;
  const char* guidance = o.cfg_scale != 1.0f ? "CFG (design prompt, 2 branches)" : "no CFG (plain prompt, 1 branch)";

  appendf(rep, "device           %s\n", dev.c_str());
  appendf(rep, "model            %s (%s; load + upload %.0f ms, %.2f GiB of weights on the GPU)\n", b.model.c_str(),
          model->info().variant.c_str(), load_ms, gib(weights));
  appendf(rep, "work             %lld text tokens, %s, cfg scale %.2f, %s, %s activations\n",
          (long long)o.text_tokens, guidance, o.cfg_scale, o.greedy ? "greedy" : "checkpoint sampler defaults",
          o.activations == ActivationPrecision::kF32 ? "f32" : "bf16");

  if (b.warmup > 0) {
    auto w = run_batch(*model, 1, std::max<int64_t>(2, b.warmup), 999, request);
    if (!w.ok()) return std::move(w).error();
  }
  cuda::reset_memory_peak();
  CHORUS_ASSIGN(const RunStats one, run_batch(*model, 1, b.frames, 1, request));
  const size_t peak = cuda::memory_stats().peak;
  CHORUS_ASSIGN(const size_t in_use, cuda::device_bytes_in_use());

  // Codec on the CPU, streamed frame by frame as a player would.
  const int64_t F = static_cast<int64_t>(one.codes.size());
  double codec_first_ms = 0, codec_total_ms = 0;
  {
    codec::DecoderState st = codec.decoder.new_state();
    std::vector<float> pcm;
    for (int64_t f = 0; f < F; ++f) {
      const auto tc = Clock::now();
      CHORUS_TRY(codec.decoder.decode(st, one.codes[static_cast<size_t>(f)].data(), 1, pcm));
      const double ms = ms_since(tc);
      if (f == 0) codec_first_ms = ms;
      codec_total_ms += ms;
    }
  }
  // Codec on the GPU: weights uploaded once, one stream state allocated outside the timed part.
  CHORUS_ASSIGN(auto gpu_codec, codec::load_cuda_codec(b.model));
  CHORUS_ASSIGN(auto gpu_state, gpu_codec.new_state());
  CHORUS_TRY(gpu_codec_stream(gpu_codec, gpu_state, one.codes));  // warm-up
  CHORUS_ASSIGN(const GpuCodecStats gc, gpu_codec_stream(gpu_codec, gpu_state, one.codes));
  CHORUS_ASSIGN(const FirstAudio fa, first_audio(*model, gpu_codec, gpu_state, request, 10));
  const double n = static_cast<double>(std::max<int64_t>(1, F - 1));
  const double bb_ms = (one.times.backbone_s - one.first.backbone_s) * 1e3 / n;
  const double depth_ms = (one.times.depth_s - one.first.depth_s) * 1e3 / n;
  const double codec_ms = codec_total_ms / static_cast<double>(std::max<int64_t>(1, F));
  appendf(rep, "single stream    %lld frames: %.3f ms per frame (wall, host included); %s; codec %.3f ms per frame on "
               "the GPU (frame 0 %.3f ms), %.3f ms on the CPU\n",
          (long long)F, one.step_ms, device_split(bb_ms, depth_ms, "backbone", "depth decoder").c_str(), gc.mean_ms,
          gc.first_ms, codec_ms);
  appendf(rep, "real-time factor %.4f generation only (%.0fx faster than real time); %.4f with the GPU codec in series, "
               "%.4f with the CPU codec\n",
          one.step_ms / frame_ms, frame_ms / one.step_ms, (one.step_ms + gc.mean_ms) / frame_ms,
          (one.step_ms + codec_ms) / frame_ms);
  // Which decode path ran: persistent stack launches so far (0: every step went kernel by kernel).
  appendf(rep, "persistent decode-stack launches so far: %llu\n",
          static_cast<unsigned long long>(cuda::decode_stack_launches()));
  rep += cuda::decode_stack_trace_report();  // empty without --stack-trace
  appendf(rep, "first audio      %.2f ms median, best %.2f ms (warm, 10 requests: prompt on the GPU text encoder %.2f ms "
               "median, request -> frame 0's codes %.2f ms median, then frame 0's audio on the GPU codec)\n",
          fa.median_ms, fa.best_ms, fa.prompt_median_ms, fa.codes_median_ms);
  appendf(rep, "first frame      %.2f ms in the measured run (request -> frame 0's codes, prefill %.2f ms on the "
               "device); first audio %.2f ms with the CPU codec\n",
          one.first_ms, one.first.prefill_s * 1e3, one.first_ms + codec_first_ms);
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus in the single-stream run (weights %.3f GiB); %.3f GiB "
               "in use on the device incl. the CUDA context\n",
          gib(std::max(peak, weights)), gib(weights), gib(in_use));
  for (int64_t B : b.batches) {
    CHORUS_ASSIGN(const RunStats r, run_batch(*model, B, b.batch_frames, 1000, request));
    const double steps = static_cast<double>(b.batch_frames - 1);
    appendf(rep, "batch %4lld      step %.3f ms (%s), first step %.1f ms, aggregate %.1f real-time streams\n",
            (long long)B, r.step_ms,
            device_split((r.times.backbone_s - r.first.backbone_s) * 1e3 / steps,
                         (r.times.depth_s - r.first.depth_s) * 1e3 / steps, "backbone", "depth decoder")
                .c_str(),
            r.first_ms, static_cast<double>(B) * frame_ms / r.step_ms);
  }
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus over all runs\n", gib(cuda::memory_stats().peak));
  return rep;
}

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
