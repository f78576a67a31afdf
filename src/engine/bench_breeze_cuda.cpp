// `chorus bench --device cuda` for Breeze TTS 2 checkpoints (breeze_engine_cuda.h).
#include "engine/breeze_engine_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <random>

#include "models/breeze_tts/config.h"
#include "models/codec/codec_folder.h"
#include "models/codec/decoder_cuda.h"
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

struct RunStats {
  double first_ms = 0;  // create_stream (prompt: GPU text encoder) + first step (prefill, frame 0)
  double step_ms = 0;   // mean wall time of the later steps
  StageTimes times, first;
  std::vector<std::vector<int32_t>> codes;  // stream 0's frames
};

Result<RunStats> run_batch(const TtsModel& m, const breeze_tts::Config& c, const BreezeBenchOptions& o, int64_t B,
                           int64_t frames, uint64_t seed) {
  RunStats r;
  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<TtsStream>> owned;
  std::vector<TtsStream*> batch;
  for (int64_t i = 0; i < B; ++i) {
    CHORUS_ASSIGN(auto s, m.create_stream(bench_request(c, o, seed + static_cast<uint64_t>(i), frames)));
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

// Request → frame 0's codes → frame 0's audio, warm, all on the GPU (text encoder, prefill, frame
// 0, codec): a new stream per request, the codec state reused (reset) as a server would pool it.
// Medians of `runs`; `prompt` is create_stream alone (text encoder + prompt rows).
struct FirstAudio {
  double best_ms = 0, median_ms = 0, codes_median_ms = 0, prompt_median_ms = 0;
};
Result<FirstAudio> first_audio(const TtsModel& m, const breeze_tts::Config& c, const BreezeBenchOptions& o,
                               const codec::CudaDecoder& dec, codec::CudaDecoderState& st, int runs) {
  std::vector<double> total, codes, prompt;
  std::vector<float> pcm;
  for (int i = 0; i < runs; ++i) {
    CHORUS_TRY(dec.reset(st));
    pcm.clear();
    const SynthesisRequest req = bench_request(c, o, 500 + static_cast<uint64_t>(i), 8);
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

// The GPU codec streamed frame by frame as a player would: frame 0's and the mean time per frame.
Result<std::pair<double, double>> gpu_codec_stream(const codec::CudaDecoder& dec, codec::CudaDecoderState& st,
                                                   const std::vector<std::vector<int32_t>>& frames) {
  CHORUS_TRY(dec.reset(st));
  std::vector<float> pcm;
  double first = 0, sum = 0;
  for (size_t f = 0; f < frames.size(); ++f) {
    const auto tc = Clock::now();
    CHORUS_TRY(dec.decode(st, frames[f].data(), 1, pcm));
    const double ms = ms_since(tc);
    if (f == 0) first = ms;
    sum += ms;
  }
  return std::pair{first, sum / static_cast<double>(std::max<size_t>(1, frames.size()))};
}

}  // namespace

Result<std::string> cuda_bench_breeze(const BreezeBenchOptions& o) {
  const CudaBenchOptions& b = o.base;
  if (b.frames < 2 || b.batch_frames < 2 || b.warmup < 0)
    return make_error(ErrorCode::kInvalidArgument, "bench: --frames must be >= 2, --warmup >= 0");
  std::string rep;
  CHORUS_ASSIGN(const std::string dev, cuda::device_summary(0));
  const auto t_load = Clock::now();
  CHORUS_ASSIGN(auto model, load_cuda_breeze_model(b.model, {}));
  const double load_ms = ms_since(t_load);
  const size_t weights = cuda::memory_stats().current;
  CHORUS_ASSIGN(const breeze_tts::Config c, breeze_tts::load_config(b.model));
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
    auto w = run_batch(*model, c, o, 1, std::max<int64_t>(2, b.warmup), 999);
    if (!w.ok()) return std::move(w).error();
  }
  cuda::reset_memory_peak();
  CHORUS_ASSIGN(const RunStats one, run_batch(*model, c, o, 1, b.frames, 1));
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
  CHORUS_ASSIGN(const auto gpu_codec_ms, gpu_codec_stream(gpu_codec, gpu_state, one.codes));
  CHORUS_ASSIGN(const FirstAudio fa, first_audio(*model, c, o, gpu_codec, gpu_state, 10));
  const double n = static_cast<double>(std::max<int64_t>(1, F - 1));
  const double bb_ms = (one.times.backbone_s - one.first.backbone_s) * 1e3 / n;
  const double depth_ms = (one.times.depth_s - one.first.depth_s) * 1e3 / n;
  const double codec_ms = codec_total_ms / static_cast<double>(std::max<int64_t>(1, F));
  appendf(rep, "single stream    %lld frames: %.3f ms per frame (wall, host included) = backbone %.3f ms + depth "
               "decoder %.3f ms (device); codec %.3f ms per frame on the GPU (frame 0 %.3f ms), %.3f ms on the CPU\n",
          (long long)F, one.step_ms, bb_ms, depth_ms, gpu_codec_ms.second, gpu_codec_ms.first, codec_ms);
  appendf(rep, "real-time factor %.4f generation only (%.0fx faster than real time); %.4f with the GPU codec in series, "
               "%.4f with the CPU codec\n",
          one.step_ms / frame_ms, frame_ms / one.step_ms, (one.step_ms + gpu_codec_ms.second) / frame_ms,
          (one.step_ms + codec_ms) / frame_ms);
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
    CHORUS_ASSIGN(const RunStats r, run_batch(*model, c, o, B, b.batch_frames, 1000));
    const double steps = static_cast<double>(b.batch_frames - 1);
    appendf(rep, "batch %4lld      step %.3f ms (backbone %.3f + depth %.3f device), first step %.1f ms, "
                 "aggregate %.1f real-time streams\n",
            (long long)B, r.step_ms, (r.times.backbone_s - r.first.backbone_s) * 1e3 / steps,
            (r.times.depth_s - r.first.depth_s) * 1e3 / steps, r.first_ms, static_cast<double>(B) * frame_ms / r.step_ms);
  }
  appendf(rep, "GPU memory       peak %.3f GiB allocated by chorus over all runs\n", gib(cuda::memory_stats().peak));
  return rep;
}

}  // namespace chorus::engine

#endif  // CHORUS_HAVE_CUDA
